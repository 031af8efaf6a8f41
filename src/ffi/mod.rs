//! The `extern "C"` layer: MXNet 1.9's KVStore and NDArray C API. Every export runs inside
//! [`ffi_boundary!`], validates its arguments with [`args`] and [`handle`], and delegates to
//! the safe core. This module, `handle` and `args` are where the C contract is trusted.

#[macro_use]
pub(crate) mod boundary;
mod args;
mod autograd_modes;
mod cstr_table;
pub(crate) mod exports;
mod features;
mod fork;
pub(crate) mod handle;
mod kvstore;
mod kvstore_calls;
mod last_error;
mod ndarray;
mod ndarray_sparse;
mod np_shape;
mod ops;
mod quiet_panics;
mod profiler;
mod runtime;
pub(crate) mod served;
mod served_store;
mod stubs;
mod thread_buffers;
mod types;
pub(crate) mod updater;

pub use types::*;

/// Makes every later error of an export also go to `mirror` (hosted mode: the host's).
pub(crate) fn mirror_last_error(mirror: fn(&str)) {
    last_error::mirror_to(mirror);
}

/// Records `message` as the calling thread's last error of call `name` (`MXGetLastError`).
pub(crate) fn record_error(name: &str, message: &str) {
    last_error::set(name, message);
}
