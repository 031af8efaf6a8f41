//! A CPU stand-in for the CUDA driver API, loaded as `libcuda.so.1` (see docs/gpu.md). Test
//! equipment only: never installed, never found by default, its timings never GPU figures.

pub mod host_kernels;
