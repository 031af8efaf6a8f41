//! Pinned (cuMemHostAlloc) and registered (cuMemHostRegister) host memory: ordinary host
//! memory, counted, and the only host memory asynchronous copies treat as truly asynchronous.

use crate::result::*;
use once_cell::sync::Lazy;
use parking_lot::Mutex;
use std::alloc::Layout;
use std::collections::BTreeMap;

enum Kind {
    /// Allocated here; freed by cuMemFreeHost.
    Pinned(Layout),
    /// The caller's memory; forgotten by cuMemHostUnregister.
    Registered,
}

struct Region {
    size: usize,
    kind: Kind,
}

static REGIONS: Lazy<Mutex<BTreeMap<usize, Region>>> = Lazy::new(|| Mutex::new(BTreeMap::new()));

const PAGE: usize = 4096;

/// cuMemHostAlloc / cuMemAllocHost.
pub fn allocate(size: usize) -> Result<*mut u8, CUresult> {
    if size == 0 {
        return Err(INVALID_VALUE);
    }
    let layout = Layout::from_size_align(size, PAGE).map_err(|_| OUT_OF_MEMORY)?;
    // SAFETY: `layout` has a non-zero size.
    let pointer = unsafe { std::alloc::alloc_zeroed(layout) };
    if pointer.is_null() {
        return Err(OUT_OF_MEMORY);
    }
    REGIONS.lock().insert(pointer as usize, Region { size, kind: Kind::Pinned(layout) });
    Ok(pointer)
}

/// cuMemFreeHost: `pointer` must be the start of pinned memory from [`allocate`].
pub fn free(pointer: usize) -> Result<(), CUresult> {
    let mut regions = REGIONS.lock();
    let Some(Region { kind: Kind::Pinned(layout), .. }) = regions.get(&pointer) else { return Err(INVALID_VALUE) };
    let layout = *layout;
    regions.remove(&pointer);
    // SAFETY: allocated by `allocate` with this layout, removed from the table, freed once.
    unsafe { std::alloc::dealloc(pointer as *mut u8, layout) };
    Ok(())
}

fn overlaps(regions: &BTreeMap<usize, Region>, start: usize, size: usize) -> bool {
    regions.range(..start + size).next_back().is_some_and(|(base, r)| base + r.size > start)
}

/// cuMemHostRegister.
pub fn register(pointer: usize, size: usize) -> Result<(), CUresult> {
    if pointer == 0 || size == 0 {
        return Err(INVALID_VALUE);
    }
    let mut regions = REGIONS.lock();
    if overlaps(&regions, pointer, size) {
        return Err(HOST_MEMORY_ALREADY_REGISTERED);
    }
    regions.insert(pointer, Region { size, kind: Kind::Registered });
    Ok(())
}

/// cuMemHostUnregister: `pointer` must start a registered range.
pub fn unregister(pointer: usize) -> Result<(), CUresult> {
    let mut regions = REGIONS.lock();
    match regions.get(&pointer) {
        Some(Region { kind: Kind::Registered, .. }) => {
            regions.remove(&pointer);
            Ok(())
        }
        _ => Err(HOST_MEMORY_NOT_REGISTERED),
    }
}

/// Whether `[pointer, pointer + len)` lies in one pinned or registered region.
pub fn contains(pointer: usize, len: usize) -> bool {
    let regions = REGIONS.lock();
    regions.range(..=pointer).next_back().is_some_and(|(base, r)| pointer + len <= base + r.size)
}
