//! Process-wide calls: errors, version, shutdown, roles and the parameter-server environment.

#![allow(non_snake_case)]

use super::args::Out;
use crate::error::Result;
use once_cell::sync::Lazy;
use parking_lot::RwLock;
use std::collections::HashMap;
use std::os::raw::{c_char, c_int};

/// MXNet's version code for 1.9.1: major·10000 + minor·100 + patch.
pub const MXNET_VERSION: c_int = 10901;

/// The last error of the calling thread.
///
/// Returns: a message naming the failed call and its cause, prefixed `MXNetError: `; empty
/// if no call has failed on this thread.
/// Ownership: borrowed; valid until the next failing call on the same thread.
pub extern "C" fn MXGetLastError() -> *const c_char {
    super::last_error::as_ptr()
}

/// The MXNet version this library stands in for (10901 = 1.9.1).
///
/// Ownership: `*out` is written on success.
pub extern "C" fn MXGetVersion(out: *mut c_int) -> c_int {
    ffi_boundary!("MXGetVersion", {
        Out::new(out, "out")?.write(MXNET_VERSION);
        Ok(())
    })
}

/// Waits for all pending operations before the process exits.
///
/// Ownership: none.
pub extern "C" fn MXNotifyShutdown() -> c_int {
    ffi_boundary!("MXNotifyShutdown", {
        crate::engine::engine().wait_all();
        Ok(())
    })
}

/// The number of usable GPUs: 0 without CUDA.
///
/// Ownership: `*out` is written on success.
pub extern "C" fn MXGetGPUCount(out: *mut c_int) -> c_int {
    ffi_boundary!("MXGetGPUCount", {
        Out::new(out, "out")?.write(crate::gpu::device_count());
        Ok(())
    })
}

/// Values given by `MXInitPSEnv`; they take precedence over the process environment.
static PS_ENV: Lazy<RwLock<HashMap<String, String>>> = Lazy::new(|| RwLock::new(HashMap::new()));

pub(crate) fn set_ps_env(keys: &[&str], vals: &[&str]) {
    let mut env = PS_ENV.write();
    for (k, v) in keys.iter().zip(vals) {
        env.insert((*k).to_string(), (*v).to_string());
    }
}

/// A parameter-server setting (`DMLC_*`): `MXInitPSEnv`'s value, else the environment's.
pub(crate) fn ps_env(name: &str) -> Option<String> {
    PS_ENV.read().get(name).cloned().or_else(|| std::env::var(name).ok())
}

/// Writes 1 to `ret` if this process has `role` (an unset `DMLC_ROLE` means worker).
pub(crate) fn role_is(ret: *mut c_int, role: &str) -> Result<()> {
    let out = Out::new(ret, "ret")?;
    let actual = ps_env("DMLC_ROLE").unwrap_or_else(|| "worker".to_string());
    out.write((actual == role) as c_int);
    Ok(())
}

/// nnvm's spelling of [`MXGetLastError`]: the same thread-local message.
///
/// Ownership: borrowed; valid until the next failing call on the same thread.
pub extern "C" fn NNGetLastError() -> *const c_char {
    super::last_error::as_ptr()
}

/// Sets the calling thread's last error to `msg` (nnvm's frontends report their own errors
/// through it). A NULL or non-UTF-8 `msg` records that fact instead.
///
/// Ownership: `msg` is read during the call only.
pub extern "C" fn NNAPISetLastError(msg: *const c_char) {
    // The C signature returns void, so the boundary's status has nowhere to go: a failure
    // has already been recorded as the last error, which is what this call is for.
    let _ = ffi_boundary!("NNAPISetLastError", {
        let text = super::args::string(msg, "msg")?;
        super::last_error::set_raw(text);
        Ok(())
    });
}
