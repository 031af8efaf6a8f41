//! Device memory: host allocations handed out under an address the host cannot dereference
//! (the real address with bit 62 set: non-canonical on x86-64, so a host read faults), and the
//! translation of device ranges back to host memory for copies and kernels.

use crate::context::Context;
use crate::devices;
use crate::host_memory;
use crate::result::*;
use once_cell::sync::Lazy;
use parking_lot::RwLock;
use std::alloc::Layout;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Set in every device address; clear in every host address.
pub const DEVICE_BIT: u64 = 1 << 62;
/// cudaMalloc's alignment guarantee.
const ALIGN: usize = 256;
/// What fresh device memory holds (all-ones: NaN in every float type), so a kernel or copy
/// that reads memory nobody wrote gives NaN instead of a plausible zero.
const FRESH_BYTE: u8 = 0xff;

pub struct Allocation {
    pub address: u64,
    pub size: usize,
    pub device: i32,
    pub context: u64,
    host: *mut u8,
    layout: Layout,
    live: AtomicBool,
}

// SAFETY: `host` is owned by the Allocation (freed once, in Drop); access to the bytes is
// the driver API's contract (stream order), as on a GPU.
unsafe impl Send for Allocation {}
// SAFETY: as for Send; the struct's own fields are immutable or atomic.
unsafe impl Sync for Allocation {}

impl Drop for Allocation {
    fn drop(&mut self) {
        // SAFETY: `host` came from `std::alloc::alloc` with `layout` and is freed only here.
        unsafe { std::alloc::dealloc(self.host, self.layout) }
    }
}

/// Live allocations by device address.
static ALLOCATIONS: Lazy<RwLock<BTreeMap<u64, Arc<Allocation>>>> = Lazy::new(|| RwLock::new(BTreeMap::new()));

/// cuMemAlloc: `size` bytes on the context's device.
pub fn allocate(context: &Context, size: usize) -> Result<u64, CUresult> {
    if size == 0 {
        return Err(INVALID_VALUE);
    }
    let layout = Layout::from_size_align(size, ALIGN).map_err(|_| OUT_OF_MEMORY)?;
    let device = devices::get(context.device)?;
    device.reserve(size as u64)?;
    // SAFETY: `layout` has a non-zero size.
    let host = unsafe { std::alloc::alloc(layout) };
    if host.is_null() {
        device.release(size as u64);
        return Err(OUT_OF_MEMORY);
    }
    // SAFETY: `host` is valid for `size` writable bytes.
    unsafe { std::ptr::write_bytes(host, FRESH_BYTE, size) };
    let address = host as u64 | DEVICE_BIT;
    let allocation = Arc::new(Allocation { address, size, device: context.device, context: context.handle, host, layout, live: AtomicBool::new(true) });
    ALLOCATIONS.write().insert(address, allocation);
    Ok(address)
}

/// cuMemFree: `address` must be the start of a live allocation. Work still holding a
/// [`Span`] of it keeps the bytes but fails its liveness check.
pub fn free(address: u64) -> Result<(), CUresult> {
    let allocation = ALLOCATIONS.write().remove(&address).ok_or(INVALID_VALUE)?;
    retire(&allocation);
    Ok(())
}

fn retire(allocation: &Allocation) {
    allocation.live.store(false, Ordering::Release);
    if let Ok(device) = devices::get(allocation.device) {
        device.release(allocation.size as u64);
    }
}

/// Frees every allocation of a context being destroyed or reset.
pub fn free_context(context: u64) {
    let mut all = ALLOCATIONS.write();
    let doomed: Vec<u64> = all.values().filter(|a| a.context == context).map(|a| a.address).collect();
    for address in doomed {
        if let Some(allocation) = all.remove(&address) {
            retire(&allocation);
        }
    }
}

/// The live allocation containing `address`, if any.
pub fn find(address: u64) -> Option<Arc<Allocation>> {
    let all = ALLOCATIONS.read();
    let (_, allocation) = all.range(..=address).next_back()?;
    (address < allocation.address + allocation.size as u64).then(|| allocation.clone())
}

/// A range of memory a copy or a kernel may touch, translated to host memory, holding its
/// allocation so the bytes outlive a concurrent free.
pub struct Span {
    host: usize,
    allocation: Option<Arc<Allocation>>,
}

impl Span {
    /// Host memory the caller named directly (a copy's host side).
    pub fn host(pointer: *const u8) -> Span {
        Span { host: pointer as usize, allocation: None }
    }

    /// The host address, or CUDA_ERROR_ILLEGAL_ADDRESS if the allocation was freed since
    /// the work was enqueued (a use after free on a GPU).
    pub fn get(&self) -> Result<*mut u8, CUresult> {
        match &self.allocation {
            Some(a) if !a.live.load(Ordering::Acquire) => Err(ILLEGAL_ADDRESS),
            _ => Ok(self.host as *mut u8),
        }
    }
}

/// Translates the device range `[address, address + len)` for work of `context`: it must lie
/// inside one live allocation of a device the context may access (or in pinned host memory,
/// which unified addressing maps), else CUDA_ERROR_ILLEGAL_ADDRESS. `len` 0 accepts the
/// one-past-the-end address (a kernel's end pointer).
pub fn span(context: &Context, address: u64, len: usize) -> Result<Span, CUresult> {
    if address & DEVICE_BIT == 0 {
        return if host_memory::contains(address as usize, len.max(1)) { Ok(Span::host(address as *const u8)) } else { Err(ILLEGAL_ADDRESS) };
    }
    let allocation = find(address).or_else(|| if len == 0 { find(address.wrapping_sub(1)) } else { None }).ok_or(ILLEGAL_ADDRESS)?;
    let offset = (address - allocation.address) as usize;
    if offset.checked_add(len).is_none_or(|end| end > allocation.size) || !context.may_access(allocation.device) {
        return Err(ILLEGAL_ADDRESS);
    }
    Ok(Span { host: allocation.host as usize + offset, allocation: Some(allocation) })
}
