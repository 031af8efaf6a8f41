//! GPU support on CUDA. This is the only module that names cudarc: the driver and NVRTC are
//! loaded at run time, so libkvstore builds on a machine with no CUDA at all and loads
//! without libcuda.
//!
//! Built so far: loading ([`driver`], [`nvrtc`]), the kernels ([`kernels`], sources in
//! `kernels/`), and the host-side logic of the GPU backend ([`placement`], [`fused`],
//! [`staging`], [`completion`]). GPU arrays themselves are not built yet: a `gpu(i)` context
//! answers a clear error, on machines with a GPU too.

pub mod completion;
pub mod driver;
pub mod fused;
pub mod kernels;
pub mod launch;
pub mod nvrtc;
pub mod placement;
pub mod staging;

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

/// Why GPU memory cannot be used here.
fn unavailable(dev_id: i32) -> String {
    match driver::runtime() {
        Err(reason) => format!("gpu({dev_id}) is not available: no usable CUDA device ({reason})"),
        Ok(rt) => match rt.device(dev_id) {
            Err(e) => e,
            Ok(_) => format!("gpu({dev_id}) exists, but GPU arrays are not supported by this build of libkvstore yet"),
        },
    }
}

/// Succeeds when `gpu(dev_id)` can hold values. Until GPU arrays are built, never.
pub fn require_device(dev_id: i32) -> Result<()> {
    crate::bail!("{}", unavailable(dev_id))
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
    fn gpu_contexts_answer_a_clear_error_until_gpu_arrays_exist() {
        let err = usable_context(Context::from_codes(2, 0).unwrap()).unwrap_err();
        assert!(err.message().contains("gpu(0)"), "{err}");
        assert_eq!(usable_context(Context::cpu(0)).unwrap(), Context::cpu(0));
    }
}
