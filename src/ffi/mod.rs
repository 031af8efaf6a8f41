//! The `extern "C"` layer: MXNet 1.9's KVStore and NDArray C API. Every export runs inside
//! [`ffi_boundary!`], validates its arguments with [`args`] and [`handle`], and delegates to
//! the safe core. This module, `handle` and `args` are where the C contract is trusted.

#[macro_use]
mod boundary;
mod args;
mod cstr_table;
mod features;
mod fork;
mod handle;
mod kvstore;
mod kvstore_calls;
mod last_error;
mod ndarray;
mod ndarray_sparse;
mod ops;
mod quiet_panics;
mod runtime;
mod stubs;
mod thread_buffers;
mod types;
mod updater;

pub use types::*;
