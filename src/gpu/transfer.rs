//! Synchronous copies between pageable host memory and a device, through the pinned staging
//! pool of synchronous transfers (for `SyncCopyFromCPU` / `SyncCopyToCPU`, which wait by
//! contract, and the planner's reads of GPU row ids). Large transfers go
//! in chunks of the largest staging class.

use super::memory::{DevicePtr, PinnedMemory};
use super::queue::{Place, Queue};
use super::staging::chunks;

/// Copies `src` to `dst` and waits.
pub fn upload(dst: DevicePtr, src: &[u8]) -> Result<(), String> {
    for (offset, len, _) in chunks(src.len()) {
        let mut staged = PinnedMemory::sync_staging(len)?;
        staged.bytes_mut().copy_from_slice(&src[offset..offset + len]);
        let mut q = Queue::new();
        q.copy(Place::Device(dst.offset(offset)), Place::Host(staged.at(0)), len);
        q.wait()?;
    }
    Ok(())
}

/// Copies `dst.len()` bytes from `src` into `dst` and waits.
pub fn download(dst: &mut [u8], src: DevicePtr) -> Result<(), String> {
    for (offset, len, _) in chunks(dst.len()) {
        let staged = PinnedMemory::sync_staging(len)?;
        let mut q = Queue::new();
        q.copy(Place::Host(staged.at(0)), Place::Device(src.offset(offset)), len);
        q.wait()?;
        dst[offset..offset + len].copy_from_slice(&staged.bytes()[..len]);
    }
    Ok(())
}

/// Copies `bytes` bytes from `src` to `dst` (device memory, on one device or two) and waits.
pub fn copy_device(dst: DevicePtr, src: DevicePtr, bytes: usize) -> Result<(), String> {
    let mut q = Queue::new();
    q.copy(Place::Device(dst), Place::Device(src), bytes);
    q.wait()
}

/// Sets `n` elements of `dtype` at `dst` to the element whose bytes are `element`, and waits.
pub fn fill(dst: DevicePtr, dtype: crate::base::DType, element: &[u8], n: u64) -> Result<(), String> {
    let mut value = [0u8; 8];
    value[..element.len().min(8)].copy_from_slice(&element[..element.len().min(8)]);
    let mut q = Queue::new();
    super::sums::fill(&mut q, dst, dtype, value, n);
    q.wait()
}
