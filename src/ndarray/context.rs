//! Device contexts, with MXNet's frozen device-type codes.

use crate::error::Result;
use std::fmt;

/// A device type. The discriminants are MXNet's `dev_type` codes and are part of the ABI.
#[repr(i32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeviceType {
    /// `cpu`
    Cpu = 1,
    /// `gpu`
    Gpu = 2,
    /// `cpu_pinned`: page-locked host memory; ordinary host memory without CUDA.
    CpuPinned = 3,
    /// `cpu_shared`: shared host memory.
    CpuShared = 5,
}

impl DeviceType {
    /// The device type with this MXNet code.
    pub fn from_code(code: i32) -> Result<DeviceType> {
        Ok(match code {
            1 => DeviceType::Cpu,
            2 => DeviceType::Gpu,
            3 => DeviceType::CpuPinned,
            5 => DeviceType::CpuShared,
            _ => crate::bail!("unknown device type {code} (expected 1 cpu, 2 gpu, 3 cpu_pinned, 5 cpu_shared)"),
        })
    }
}

/// A device context: type and ordinal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Context {
    /// The device type.
    pub dev_type: DeviceType,
    /// The device ordinal.
    pub dev_id: i32,
}

impl Context {
    /// `cpu(id)`
    pub const fn cpu(dev_id: i32) -> Context {
        Context { dev_type: DeviceType::Cpu, dev_id }
    }

    /// `cpu_pinned(id)`: where MXNet's local stores keep their values.
    pub const fn cpu_pinned(dev_id: i32) -> Context {
        Context { dev_type: DeviceType::CpuPinned, dev_id }
    }

    /// The context with these MXNet codes. Whether a GPU context can hold values is the GPU
    /// backend's to say (`gpu::usable_context`), checked where arrays are made.
    pub fn from_codes(dev_type: i32, dev_id: i32) -> Result<Context> {
        let dev_type = DeviceType::from_code(dev_type)?;
        crate::ensure!(dev_id >= 0, "device id {dev_id} is negative");
        Ok(Context { dev_type, dev_id })
    }

}

impl fmt::Display for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self.dev_type {
            DeviceType::Cpu => "cpu",
            DeviceType::Gpu => "gpu",
            DeviceType::CpuPinned => "cpu_pinned",
            DeviceType::CpuShared => "cpu_shared",
        };
        write!(f, "{name}({})", self.dev_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_codes_match_mxnet() {
        assert_eq!(DeviceType::Cpu as i32, 1);
        assert_eq!(DeviceType::Gpu as i32, 2);
        assert_eq!(DeviceType::CpuPinned as i32, 3);
        assert_eq!(DeviceType::CpuShared as i32, 5);
        assert!(DeviceType::from_code(4).is_err());
        assert_eq!(Context::from_codes(3, 0).unwrap(), Context::cpu_pinned(0));
        assert!(Context::from_codes(1, -1).is_err());
    }
}
