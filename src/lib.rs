//! libkvstore: a Rust drop-in for Apache MXNet 1.9's KVStore C API.
//!
//! The safe core (`ndarray`, `engine`, `reduce`, `store`, `gpu`) knows nothing of C; the
//! `ffi` module is the thin `extern "C"` layer that validates arguments and delegates.

pub mod backend;
pub mod base;
pub mod compression;
pub mod engine;
pub mod error;
pub mod ffi;
pub mod gpu;
pub mod hosted;
pub mod ndarray;
pub mod ops;
pub mod profiler;
pub mod reduce;
pub mod store;

pub use error::{Error, Result};
pub use ndarray::{Context, DType, DeviceType, NDArray, StorageType};
pub use store::KVStore;
