//! Device memory and pinned host memory. A device allocation never moves and is freed when
//! its owner drops it (after the work using it: ops keep their arrays alive until their
//! events fire). Pinned memory is portable (usable with every device) and comes either exact
//! (a `cpu_pinned` array) or from the staging pool ([`super::staging`]): after warm-up no
//! copy allocates pinned memory.

use super::driver::{runtime, DevPtr};
use super::staging::Pool;
use once_cell::sync::Lazy;
use parking_lot::Mutex;
use std::ffi::c_void;
use std::os::raw::c_uint;

/// `CU_MEMHOSTALLOC_PORTABLE`: pinned for every context, not only the current one.
const CU_MEMHOSTALLOC_PORTABLE: c_uint = 1;

/// An address in a device's memory (never dereferenced on the host).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DevicePtr {
    /// `gpu(ordinal)`.
    pub ordinal: i32,
    /// The device address.
    pub addr: DevPtr,
}

impl DevicePtr {
    /// `bytes` further on.
    pub fn offset(self, bytes: usize) -> DevicePtr {
        DevicePtr { ordinal: self.ordinal, addr: self.addr + bytes as u64 }
    }
}

/// An allocation on one device, zeroed when made.
#[derive(Debug)]
pub struct DeviceMemory {
    ptr: DevicePtr,
    len: usize,
}

impl DeviceMemory {
    /// `len` zero bytes on `gpu(ordinal)`; "out of memory" and other driver errors name the
    /// device and the request.
    pub fn zeroed(ordinal: i32, len: usize) -> Result<DeviceMemory, String> {
        let dev = super::device::device(ordinal)?;
        if len == 0 {
            return Ok(DeviceMemory { ptr: DevicePtr { ordinal: dev.ordinal, addr: 0 }, len });
        }
        let rt = runtime()?;
        let addr = rt.with_context(ordinal, |api| {
            let mut addr: DevPtr = 0;
            // SAFETY: the device's context is current; valid out-pointer.
            rt.check(ordinal, &format!("cuMemAlloc of {len} bytes"), unsafe { (api.mem_alloc)(&mut addr, len) })?;
            // SAFETY: `addr` holds `len` bytes just allocated; synchronous.
            let zeroed = rt.check(ordinal, "cuMemsetD8", unsafe { (api.memset_d8)(addr, 0, len) });
            if let Err(e) = zeroed {
                // SAFETY: allocated above, not yet shared.
                unsafe { (api.mem_free)(addr) };
                return Err(e);
            }
            Ok(addr)
        })?;
        Ok(DeviceMemory { ptr: DevicePtr { ordinal, addr }, len })
    }

    /// Where it starts.
    pub fn ptr(&self) -> DevicePtr {
        self.ptr
    }

    /// Its size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for DeviceMemory {
    fn drop(&mut self) {
        // In a forked child the driver is unusable: the parent's allocation is left alone.
        let (Ok(rt), true) = (runtime(), self.len > 0) else { return };
        let DevicePtr { ordinal, addr } = self.ptr;
        let _ = rt.with_context(ordinal, |api| {
            // SAFETY: allocated by cuMemAlloc in `zeroed`, freed once; no work uses it any more
            // (its users hold it until their events fired).
            rt.check(ordinal, "cuMemFree", unsafe { (api.mem_free)(addr) })
        });
    }
}

/// A pinned allocation's address, kept as an integer so the pool can be shared by threads.
#[derive(Debug)]
struct RawPinned(usize);

static STAGING: Lazy<Mutex<Pool<RawPinned>>> = Lazy::new(|| Mutex::new(Pool::default()));

/// The staging pool of synchronous transfers ([`super::transfer`]), apart from the ops': a
/// caller waits for each, so a thread's steady run of them (the planner reading GPU row ids)
/// reuses one buffer per class, however many op buffers are in flight meanwhile.
static SYNC_STAGING: Lazy<Mutex<Pool<RawPinned>>> = Lazy::new(|| Mutex::new(Pool::default()));

fn host_alloc(len: usize) -> Result<RawPinned, String> {
    let rt = runtime()?;
    // The driver allocates in the current context; portable memory serves every device.
    rt.with_context(0, |api| {
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: a context is current; valid out-pointer.
        let code = unsafe { (api.mem_host_alloc)(&mut p, len.max(1), CU_MEMHOSTALLOC_PORTABLE) };
        rt.check(0, &format!("cuMemHostAlloc of {len} bytes"), code)?;
        Ok(RawPinned(p as usize))
    })
}

/// Page-locked host memory: exact, or a staging buffer of the pool.
#[derive(Debug)]
pub struct PinnedMemory {
    raw: Option<RawPinned>,
    len: usize,
    /// The pool class it returns to, if pooled, and whether that is the synchronous
    /// transfers' pool.
    pooled: Option<(usize, bool)>,
}

// SAFETY: plain host memory owned by this value; access goes through &/&mut as for a Vec.
unsafe impl Send for PinnedMemory {}
// SAFETY: as above: shared access is read-only.
unsafe impl Sync for PinnedMemory {}

impl PinnedMemory {
    /// `len` zero bytes of pinned memory of its own (a `cpu_pinned` array).
    pub fn exact(len: usize) -> Result<PinnedMemory, String> {
        let raw = host_alloc(len)?;
        let mut m = PinnedMemory { raw: Some(raw), len, pooled: None };
        m.bytes_mut().fill(0);
        Ok(m)
    }

    /// `len` bytes (contents undefined: the caller overwrites them) from the staging pool;
    /// larger than the largest class, exact.
    pub fn staging(len: usize) -> Result<PinnedMemory, String> {
        if len > super::staging::MAX_CLASS_BYTES {
            return PinnedMemory::exact(len);
        }
        let raw = STAGING.lock().take(len, host_alloc)?;
        Ok(PinnedMemory { raw: Some(raw), len, pooled: Some((len, false)) })
    }

    /// [`PinnedMemory::staging`] for a synchronous transfer: from the pool of those (see
    /// [`SYNC_STAGING`]).
    pub fn sync_staging(len: usize) -> Result<PinnedMemory, String> {
        if len > super::staging::MAX_CLASS_BYTES {
            return PinnedMemory::exact(len);
        }
        let raw = SYNC_STAGING.lock().take(len, host_alloc)?;
        Ok(PinnedMemory { raw: Some(raw), len, pooled: Some((len, true)) })
    }

    fn ptr(&self) -> *mut u8 {
        match &self.raw {
            Some(r) if self.len > 0 => r.0 as *mut u8,
            _ => std::ptr::NonNull::dangling().as_ptr(),
        }
    }

    /// Its bytes.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: `len` bytes of host memory owned by self (dangling and empty when len = 0).
        unsafe { std::slice::from_raw_parts(self.ptr(), self.len) }
    }

    /// Its bytes, writable.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as `bytes`, borrowed exclusively.
        unsafe { std::slice::from_raw_parts_mut(self.ptr(), self.len) }
    }

    /// Its size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Where byte `offset` is, for a copy (the caller keeps the memory alive until the
    /// copy's event fired).
    pub fn at(&self, offset: usize) -> HostPtr {
        HostPtr(self.ptr().wrapping_add(offset.min(self.len)) as usize)
    }

    /// Pinned allocations made by the staging pool so far (none after warm-up).
    pub fn staging_allocations() -> usize {
        STAGING.lock().allocated.iter().sum()
    }
}

impl Drop for PinnedMemory {
    fn drop(&mut self) {
        let Some(raw) = self.raw.take() else { return };
        match self.pooled {
            Some((len, false)) => STAGING.lock().give_back(len, raw),
            Some((len, true)) => SYNC_STAGING.lock().give_back(len, raw),
            None => {
                let Ok(rt) = runtime() else { return };
                let _ = rt.with_context(0, |api| {
                    // SAFETY: allocated by cuMemHostAlloc, freed once, no copy uses it any more.
                    rt.check(0, "cuMemFreeHost", unsafe { (api.mem_free_host)(raw.0 as *mut c_void) })
                });
            }
        }
    }
}

/// A pinned host address for a copy, made only from [`PinnedMemory::at`].
#[derive(Debug, Clone, Copy)]
pub struct HostPtr(usize);

impl HostPtr {
    pub(crate) fn as_ptr(self) -> *mut c_void {
        self.0 as *mut c_void
    }
}
