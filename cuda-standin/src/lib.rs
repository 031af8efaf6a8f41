//! A CPU stand-in for the CUDA driver API, loaded as `libcuda.so.1` (see docs/gpu-standin.md).
//! Test equipment only: never installed, never found by default, its timings never GPU
//! figures. One module per concern; `exports/` holds the C entry points.

pub mod host_kernels;

mod call;
mod config;
mod context;
mod copy;
mod devices;
mod event;
mod exports;
mod faults;
mod handles;
mod host_memory;
pub mod image;
mod launch;
mod module;
mod memory;
mod result;
mod stream;
pub mod symbols;
mod trace;
