//! The stand-in devices: H100 attributes, and each device's memory accounting.

use crate::config::config;
use crate::result::{CUresult, INVALID_DEVICE, INVALID_VALUE, OUT_OF_MEMORY};
use once_cell::sync::Lazy;
use parking_lot::Mutex;

/// The name every device reports; the suffix keeps stand-in logs from passing for a GPU's.
pub const NAME: &str = "NVIDIA H100 80GB HBM3 (CUDA stand-in)";
pub const MAX_THREADS_PER_BLOCK: u32 = 1024;
pub const MAX_BLOCK: [u32; 3] = [1024, 1024, 64];
pub const MAX_GRID: [u32; 3] = [i32::MAX as u32, 65535, 65535];
/// Static shared memory per block, and the most a kernel may opt in to.
pub const SHARED_PER_BLOCK: u32 = 48 * 1024;
pub const SHARED_PER_BLOCK_OPTIN: u32 = 227 * 1024;

/// One device's bytes in use.
pub struct Device {
    used: Mutex<u64>,
}

static DEVICES: Lazy<Vec<Device>> = Lazy::new(|| (0..config().devices).map(|_| Device { used: Mutex::new(0) }).collect());

pub fn count() -> usize {
    DEVICES.len()
}

/// The device with this ordinal, or CUDA_ERROR_INVALID_DEVICE.
pub fn get(ordinal: i32) -> Result<&'static Device, CUresult> {
    usize::try_from(ordinal).ok().and_then(|i| DEVICES.get(i)).ok_or(INVALID_DEVICE)
}

impl Device {
    /// Takes `bytes` from the device's memory, or answers CUDA_ERROR_OUT_OF_MEMORY.
    pub fn reserve(&self, bytes: u64) -> Result<(), CUresult> {
        let mut used = self.used.lock();
        if bytes > config().memory - *used {
            return Err(OUT_OF_MEMORY);
        }
        *used += bytes;
        Ok(())
    }

    pub fn release(&self, bytes: u64) {
        let mut used = self.used.lock();
        *used = used.saturating_sub(bytes);
    }

    /// `(free, total)` as cuMemGetInfo answers.
    pub fn memory_info(&self) -> (u64, u64) {
        let total = config().memory;
        (total - *self.used.lock(), total)
    }
}

/// `cuDeviceGetAttribute`'s answer for an H100 (CUdevice_attribute numbering of CUDA 12).
pub fn attribute(attribute: i32, ordinal: i32) -> Result<i32, CUresult> {
    let value = match attribute {
        1 => MAX_THREADS_PER_BLOCK as i32,
        2..=4 => MAX_BLOCK[(attribute - 2) as usize] as i32,
        5..=7 => MAX_GRID[(attribute - 5) as usize] as i32,
        8 => SHARED_PER_BLOCK as i32,
        9 => 65536,           // total constant memory
        10 => 32,             // warp size
        11 => i32::MAX,       // max pitch
        12 | 82 => 65536,     // registers per block / per SM
        13 => 1_980_000,      // clock rate, kHz
        14 => 512,            // texture alignment
        15 | 19 | 31 | 32 | 41 | 83 | 88 | 95 | 115 => 1, // overlap, map host, concurrent kernels, ECC, unified addressing, managed, concurrent managed, cooperative, memory pools
        16 => 132,            // multiprocessors
        33 => 0x18 + ordinal, // PCI bus id
        36 => 2_619_000,      // memory clock, kHz
        37 => 5120,           // memory bus width
        38 => 50 * 1024 * 1024, // L2
        39 => 2048,           // threads per SM
        40 => 3,              // async engines
        75 => 9,              // compute capability major
        76 => 0,              // minor
        81 => 228 * 1024,     // shared memory per SM
        97 => SHARED_PER_BLOCK_OPTIN as i32,
        106 => 32,            // blocks per SM
        0 | 140.. => return Err(INVALID_VALUE),
        _ => 0,
    };
    Ok(value)
}
