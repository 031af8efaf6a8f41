//! Device contexts, with MXNet's frozen device-type codes: plain data, on the ground floor so
//! that every floor (the GPU module included) can name them. `ndarray` checks a context a
//! user asks for (`Context::from_codes`: a GPU context needs a CUDA device).

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

    /// `gpu(id)` (whether the device exists is checked where arrays are made).
    pub const fn gpu(dev_id: i32) -> Context {
        Context { dev_type: DeviceType::Gpu, dev_id }
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
