//! GPU support on CUDA. This is the only module that names cudarc or the CUDA driver: the
//! driver and NVRTC are loaded at run time, so libkvstore builds on a machine with no CUDA at
//! all and loads without libcuda.
//!
//! One concern per file: loading the driver ([`driver`]: every entry point resolved up front,
//! contexts saved and restored around calls on application threads, a forked child refused)
//! and NVRTC ([`nvrtc`]); each GPU opened at first use ([`device`]: primary context,
//! non-blocking compute / host→device / device→host streams, peer access, a completion
//! thread); memory ([`memory`]: device allocations that never move, pinned host memory, the
//! staging pool of [`staging`]); one op's work on the streams, finished from events without
//! blocking the caller ([`queue`], [`completion`]); synchronous copies for the C API's
//! `SyncCopy*` ([`transfer`]); the kernels ([`kernels`], sources in `kernels/`) and the
//! host-side planning of their launches ([`launch`], [`fused`], [`placement`]); the kernels
//! loaded per device at first launch (`module`) and the launches of sums and fills ([`sums`]);
//! the queued work's copies and launches timed by GPU events for the profiler's trace
//! (`timing`, only while the profiler records).
//! Nothing here knows arrays: `ndarray` holds [`memory`]'s types, the GPU backend
//! (`backend::gpu`) turns the store's jobs into [`queue::Queue`]s.

pub mod completion;
pub mod device;
pub mod driver;
pub mod fused;
pub mod kernels;
pub mod launch;
pub mod memory;
mod module;
pub mod nvrtc;
pub mod placement;
pub mod queue;
pub mod staging;
pub mod sums;
mod timing;
pub mod transfer;

pub use memory::{DeviceMemory, DevicePtr, HostPtr, PinnedMemory};
pub use queue::{Place, Queue, StreamMemory};

use crate::error::Result;

/// Number of usable GPUs: 0 without a driver, without a device, or with a driver older than
/// CUDA 12.0 (as MXNet answers 0 when CUDA is unusable).
pub fn device_count() -> Result<i32> {
    match driver::runtime() {
        Ok(rt) => Ok(rt.devices.len() as i32),
        Err(reason) if reason.contains("forked") => Err(crate::Error::new(reason)),
        Err(_) => Ok(0),
    }
}

/// The number of usable GPUs when there is at least one; otherwise why there is none (no
/// driver, an old driver, no device, a forked child). Initialises the driver, opens no device.
pub fn require_some_device() -> Result<i32> {
    match driver::runtime() {
        Err(reason) => crate::bail!("no usable CUDA device ({reason})"),
        Ok(rt) if rt.devices.is_empty() => crate::bail!("no usable CUDA device (the driver lists none)"),
        Ok(rt) => Ok(rt.devices.len() as i32),
    }
}

/// Whether pinned host memory can be had (a usable driver with at least one device):
/// without, `cpu_pinned` arrays are ordinary host memory, as in MXNet built without CUDA.
pub fn pinned_memory_available() -> bool {
    driver::runtime().is_ok_and(|rt| !rt.devices.is_empty())
}

/// Succeeds when `gpu(dev_id)` can hold values: the driver is usable and the device exists
/// (it is opened now: context, streams, peer access).
pub fn require_device(dev_id: i32) -> Result<()> {
    match driver::runtime() {
        Err(reason) => crate::bail!("gpu({dev_id}) is not available: no usable CUDA device ({reason})"),
        Ok(_) => device::device(dev_id).map(|_| ()).map_err(crate::Error::new),
    }
}

/// `ctx`, if it can hold values: host contexts always, GPU contexts when the device is usable.
pub fn usable_context(ctx: crate::base::Context) -> Result<crate::base::Context> {
    if ctx.dev_type == crate::base::DeviceType::Gpu {
        require_device(ctx.dev_id)?;
    }
    Ok(ctx)
}

/// `(free, total)` bytes of device memory of `gpu(dev)`, from the driver.
pub fn memory_info(dev: i32) -> Result<(u64, u64)> {
    let rt = driver::runtime().map_err(|reason| crate::Error::new(format!("no usable CUDA device: {reason}")))?;
    rt.memory_info(dev).map_err(crate::Error::new)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::Context;

    #[test]
    fn gpu_contexts_answer_a_clear_error_without_a_device() {
        // Without a driver (CI's default) or beyond the devices present, gpu(99) is refused.
        let err = usable_context(Context::from_codes(2, 99).unwrap()).unwrap_err();
        assert!(err.message().contains("gpu(99)"), "{err}");
        assert_eq!(usable_context(Context::cpu(0)).unwrap(), Context::cpu(0));
    }

    #[test]
    fn requiring_a_device_agrees_with_the_count() {
        // CI has no driver: the count is 0 and the requirement fails with the reason; on a
        // machine with GPUs both give the same number.
        match require_some_device() {
            Ok(n) => assert_eq!(device_count().unwrap(), n),
            Err(e) => {
                assert_eq!(device_count().unwrap_or(0), 0);
                assert!(e.message().starts_with("no usable CUDA device ("), "{e}");
            }
        }
    }
}
