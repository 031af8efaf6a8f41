//! Process-wide calls: errors, version, shutdown, roles.

#![allow(non_snake_case)]

use super::args::Out;
use crate::error::Result;
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
    ffi_boundary!({
        Out::new(out, "out")?.write(MXNET_VERSION);
        Ok(())
    })
}

/// Waits for all pending operations before the process exits; a distributed worker store that
/// was never freed runs its exit protocol here, so that the servers stop.
///
/// Ownership: none.
pub extern "C" fn MXNotifyShutdown() -> c_int {
    ffi_boundary!({
        // Shutting down reports nothing: MXNet's engine drops pending failures at shutdown.
        let _ = crate::engine::engine().wait_all();
        crate::store::dist::shutdown_unfreed_worker();
        Ok(())
    })
}

/// The value of environment variable `name` in the C runtime, as `getenv` sees it: `*value`
/// is NULL when it is unset. MXNet's Python `environment()` helper reads and restores
/// variables through this pair, so a test can set `MXNET_KVSTORE_*` around a store's creation.
///
/// Ownership: `*value` is borrowed from the process environment; valid until the variable is
/// next set or unset.
pub extern "C" fn MXGetEnv(name: *const c_char, value: *mut *const c_char) -> c_int {
    ffi_boundary!({
        let name = env_name(name)?;
        let value = Out::new(value, "value")?;
        let name = std::ffi::CString::new(name).map_err(|_| crate::Error::new("name contains a NUL byte"))?;
        // SAFETY: `name` is a NUL-terminated string; getenv returns NULL or a pointer into the
        // environment, handed out as MXNet does, with the same lifetime rule.
        value.write(unsafe { libc::getenv(name.as_ptr()) });
        Ok(())
    })
}

/// Sets environment variable `name` to `value`, or unsets it when `value` is NULL.
///
/// Ownership: both strings are copied.
pub extern "C" fn MXSetEnv(name: *const c_char, value: *const c_char) -> c_int {
    ffi_boundary!({
        let name = env_name(name)?;
        if value.is_null() {
            std::env::remove_var(name);
        } else {
            std::env::set_var(name, super::args::string(value, "value")?);
        }
        Ok(())
    })
}

/// A variable name `setenv` accepts: not empty, no `=` (and no NUL, by construction).
fn env_name<'a>(name: *const c_char) -> Result<&'a str> {
    let name = super::args::string(name, "name")?;
    crate::ensure!(!name.is_empty() && !name.contains('='), "invalid environment variable name '{name}'");
    Ok(name)
}

/// The number of usable GPUs: 0 without a CUDA driver (12.0 or newer) or device. A forked
/// child of a process that initialised CUDA gets -1: CUDA cannot be used there.
///
/// Ownership: `*out` is written on success.
pub extern "C" fn MXGetGPUCount(out: *mut c_int) -> c_int {
    ffi_boundary!({
        Out::new(out, "out")?.write(crate::gpu::device_count()?);
        Ok(())
    })
}

/// Free and total memory of `gpu(dev)` in bytes, from the driver (`cuMemGetInfo`), each
/// converted to `int` as MXNet 1.9 does (`static_cast<int>`: it wraps above 2 GiB; use
/// `MXGetGPUMemoryInformation64`). Without a usable device: -1 with the reason.
///
/// Ownership: `*free_mem` and `*total_mem` are written on success.
pub extern "C" fn MXGetGPUMemoryInformation(dev: c_int, free_mem: *mut c_int, total_mem: *mut c_int) -> c_int {
    ffi_boundary!({
        let (free_out, total_out) = (Out::new(free_mem, "free_mem")?, Out::new(total_mem, "total_mem")?);
        let (free, total) = crate::gpu::memory_info(dev)?;
        free_out.write(free as c_int);
        total_out.write(total as c_int);
        Ok(())
    })
}

/// Free and total memory of `gpu(dev)` in bytes, from the driver (`cuMemGetInfo`). Without
/// a usable device: -1 with the reason.
///
/// Ownership: `*free_mem` and `*total_mem` are written on success.
pub extern "C" fn MXGetGPUMemoryInformation64(dev: c_int, free_mem: *mut u64, total_mem: *mut u64) -> c_int {
    ffi_boundary!({
        let (free_out, total_out) = (Out::new(free_mem, "free_mem")?, Out::new(total_mem, "total_mem")?);
        let (free, total) = crate::gpu::memory_info(dev)?;
        free_out.write(free);
        total_out.write(total);
        Ok(())
    })
}

/// Writes 1 to `ret` if this process has `role` (an unset `DMLC_ROLE` means worker).
pub(crate) fn role_is(ret: *mut c_int, role: &str) -> Result<()> {
    let out = Out::new(ret, "ret")?;
    out.write(crate::store::env::has_role(role) as c_int);
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
    let _ = ffi_boundary!({
        let text = super::args::string(msg, "msg")?;
        super::last_error::set_raw(text);
        Ok(())
    });
}
