//! Host arrays lent to the store in place: a plain dense CPU array of the host's is read (a
//! pushed value) or written (a pulled output) by the store's ops in the host array's own
//! memory, with no staging array and no copy. The native array over that memory has the host
//! array's own dependency as its token (a shallow copy of the host array, bound to its
//! variable): the host orders the store's ops with its own on the array directly, so the
//! array's next writer waits only for the store's read, and its readers wait for the pull.
//!
//! Which arrays: what the host reports decides, per array and per call. The array must be
//! dense, on a CPU context (`cpu`, `cpu_pinned`, `cpu_shared`), non-empty, of a dtype hosted
//! mode stores, with memory aligned to its element size, seen by the store in two earlier
//! calls and found in the plain layout by a probe ([`Lender`], [`probe`]: an operator's fresh
//! output, or an array a oneDNN operator recomputes in place call after call, may yet be laid
//! out in a blocked layout by the op producing it, still pending at the call). `MXNDArrayGetData` gives the memory, first reordering a
//! oneDNN-laid-out array into the plain layout (waiting for its writers, as the host
//! documents). Every other array crosses through a staging array (`super::store`).
//! An array whose chunk another array of the same call already lends (a view of it, or the
//! same array in another layout) is staged too: two tokens on one host dependency in one op
//! would make the host's engine wait on itself.
//!
//! A pending host op may still change an array's layout after the call (a oneDNN op writing
//! it in a blocked layout): each op over lent arrays first asks the host again, in the op,
//! whether the memory is still plain (`MXNDArrayToDLPack` refuses oneDNN layouts without
//! waiting) and fails with the reason if not ([`unplain`]) — never reading or writing
//! reordered memory as if it were plain.
//!
//! `KVSTORE_HOSTED_ZERO_COPY=0` stages every array, as before lending existed.

use super::dlpack::dl_type;
use super::async_op::{push_async, Property};
use super::host::{Described, Host, DENSE};
use super::sparse::dims;
use crate::engine::engine;
use crate::ffi::NDArrayHandle;
use crate::ndarray::ForeignBytes;
use crate::{NDArray, Result};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::os::raw::c_void;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;

/// The bit that marks a lent array's token, so the host engine checks its layout at op time
/// ([`unplain`]). Tokens are host array handles, so their low bits are otherwise zero.
pub(super) const LENT_TOKEN: usize = 1;

/// The bit that marks a token that is a host array over its native array's own memory (a lent
/// array's, a staging array's, an updater's view): the host array an updater can be handed
/// for that memory, ordered with the store's ops. Other tokens stand for a dependency only.
pub(super) const OVER_MEMORY: usize = 2;

/// The host array handle of a token.
pub(super) fn handle_of(token: usize) -> NDArrayHandle {
    (token & !(LENT_TOKEN | OVER_MEMORY)) as NDArrayHandle
}

/// The environment variable that turns lending off (`0`).
const ZERO_COPY_VAR: &str = "KVSTORE_HOSTED_ZERO_COPY";

fn enabled() -> bool {
    static ON: once_cell::sync::Lazy<bool> =
        once_cell::sync::Lazy::new(|| std::env::var(ZERO_COPY_VAR).map_or(true, |v| v.trim() != "0"));
    *ON
}

/// MXNet's device-type codes of host memory: cpu, cpu_pinned, cpu_shared.
const HOST_DEVICE_TYPES: [i32; 3] = [1, 3, 5];

/// A host array's memory, lent. It stays valid while the native array's token (a host handle
/// sharing the array's chunk) lives, which it does while the native array does.
struct LentBytes {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the memory is the host's, kept alive by the token; every access happens inside an
// op the host's engine orders on the host array's own dependency, so no two threads touch it
// at once in conflicting ways.
unsafe impl Send for LentBytes {}
// SAFETY: as above: shared references only read, inside ops ordered as reads.
unsafe impl Sync for LentBytes {}

impl std::fmt::Debug for LentBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LentBytes({:p}, {} bytes)", self.ptr, self.len)
    }
}

impl ForeignBytes for LentBytes {
    fn bytes(&self) -> &[u8] {
        // SAFETY: `len` bytes at `ptr` are the host array's memory (checked non-null and
        // aligned when lent), alive while the token is; see the Send/Sync reasoning.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`; writes happen only in ops the host orders as writes of the
        // host array.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

/// Which host chunk an array's memory belongs to: the first word of MXNet 1.9's `NDArray`
/// object (its `std::shared_ptr<Chunk>`'s pointer; the host's version is checked at load).
/// Compared only, never dereferenced.
fn chunk_of(array: NDArrayHandle) -> usize {
    // SAFETY: `array` is a live host NDArray handle (described by the host just before), an
    // object at least one pointer long whose first member is the chunk's shared pointer.
    unsafe { *(array as *const usize) }
}

/// Tokens of lent arrays the host's engine found laid out anew at op time ([`unplain`]):
/// their arrays are staged from then on.
static UNPLAIN: Mutex<Vec<usize>> = Mutex::new(Vec::new());
static ANY_UNPLAIN: AtomicBool = AtomicBool::new(false);

/// A host array the store has seen, by handle. It holds a host handle sharing the array's
/// chunk (so the chunk, and its address, stay this array's while the entry lives: seeing the
/// same handle over the same chunk again is the same array), and, once lent, the native array
/// over its memory (whose variable then owns that handle as its token).
struct Seen {
    chunk: usize,
    holds: Holds,
    on_host: bool,
    used: u64,
    bytes: usize,
    /// Found laid out anew at op time: staged from now on.
    unplain: bool,
    /// Whether its probe is queued ([`probe`], at its second call).
    probed: bool,
    /// What the probe found, once it has run.
    layout: Arc<AtomicU8>,
}

/// What a probe found of an array's layout once its writers queued before were done.
const LAYOUT_UNKNOWN: u8 = 0;
const LAYOUT_PLAIN: u8 = 1;
const LAYOUT_ONEDNN: u8 = 2;

enum Holds {
    /// A shallow copy of the array, not lent yet.
    Handle(usize),
    /// Lent: the memory's start, dtype and shape, and the native array over it.
    Native { ptr: usize, dtype: crate::DType, shape: Vec<i64>, native: NDArray },
}

/// The host arrays a hosted store has seen, so that an array is lent only from its third call
/// on: the first call stages it, the second stages it and queues a [`probe`] of its layout
/// behind its writers, later calls lend it if the probe found it plain. A new array every call
/// (an operator's fresh output, whose producing op may still lay it out in a oneDNN layout) is
/// therefore always staged, and so is an array a oneDNN operator recomputes in place; arrays a
/// program keeps (gradients, weights) are lent.
///
/// Entries not used for a window of calls go (the window: as many calls as there are entries,
/// at least 1024), sooner where the bytes they hold more than double (plus 256 MiB) since the
/// last sweep: a program that passes a new array every call does not keep them all alive.
#[derive(Default)]
pub(super) struct Lender {
    seen: Mutex<SeenArrays>,
}

#[derive(Default)]
struct SeenArrays {
    by_handle: HashMap<usize, Seen>,
    calls: u64,
    swept_at: u64,
    bytes: usize,
    bytes_at_sweep: usize,
}

impl SeenArrays {
    fn sweep_if_due(&mut self, host: &Host) {
        const SLACK: usize = 256 << 20;
        let window = self.by_handle.len().max(1024) as u64;
        let due = self.calls - self.swept_at > window || self.bytes > 2 * self.bytes_at_sweep + SLACK;
        if !due {
            return;
        }
        let since = self.swept_at;
        let stale: Vec<usize> = self.by_handle.iter().filter(|(_, s)| s.used <= since).map(|(&h, _)| h).collect();
        for h in stale {
            if let Some(s) = self.by_handle.remove(&h) {
                self.bytes -= s.bytes;
                s.holds.release(host);
            }
        }
        self.swept_at = self.calls;
        self.bytes_at_sweep = self.bytes;
    }

    /// Marks the arrays whose lent tokens were found laid out anew.
    fn take_unplain(&mut self, host: &Host) {
        if !ANY_UNPLAIN.swap(false, Ordering::AcqRel) {
            return;
        }
        let tokens = std::mem::take(&mut *UNPLAIN.lock());
        for s in self.by_handle.values_mut() {
            if let Holds::Native { native, .. } = &s.holds {
                let token = engine().host_token(native.var()).ok().flatten().map(|t| handle_of(t) as usize);
                if token.is_some_and(|t| tokens.contains(&t)) {
                    s.unplain = true;
                    std::mem::replace(&mut s.holds, Holds::Handle(0)).release(host);
                }
            }
        }
    }
}

impl Holds {
    fn release(self, host: &Host) {
        match self {
            Holds::Handle(0) => {}
            Holds::Handle(h) => host.forget(h as NDArrayHandle),
            // Its variable releases the token once queued ops are done with the array.
            Holds::Native { native, .. } => drop(native),
        }
    }
}

impl Lender {
    /// Lets every array go (the store is going).
    pub fn clear(&self, host: &Host) {
        let mut seen = self.seen.lock();
        for (_, s) in seen.by_handle.drain() {
            s.holds.release(host);
        }
    }
}

/// One call's lending: each host chunk lent once in a call, so one op never lists two tokens
/// of one host dependency (see the module's text).
pub(super) struct Lending<'a> {
    lender: &'a Lender,
    by_chunk: HashMap<usize, (NDArrayHandle, NDArray)>,
}

impl<'a> Lending<'a> {
    /// A call's lending from `lender`'s arrays.
    pub fn new(host: &Host, lender: &'a Lender) -> Lending<'a> {
        let mut seen = lender.seen.lock();
        seen.calls += 1;
        seen.take_unplain(host);
        seen.sweep_if_due(host);
        Lending { lender, by_chunk: HashMap::new() }
    }

    /// A native array over `array`'s own memory, or `None` where it must be staged.
    pub fn lend(&mut self, host: &Host, array: NDArrayHandle, d: &Described) -> Result<Option<NDArray>> {
        if !enabled() || d.stype != DENSE || dl_type(d.dtype).is_err() || d.shape.iter().any(|&n| n <= 0) {
            return Ok(None);
        }
        let chunk = chunk_of(array);
        if let Some((handle, native)) = self.by_chunk.get(&chunk) {
            // The same handle again (a value that is also its output): the same native array.
            return Ok((*handle == array).then(|| native.clone()));
        }
        let mut guard = self.lender.seen.lock();
        let seen = &mut *guard;
        let calls = seen.calls;
        let len = dims(&d.shape).iter().product::<usize>() * d.dtype.size();
        let known = seen.by_handle.get(&(array as usize)).is_some_and(|s| s.chunk == chunk);
        if !known {
            let on_host = HOST_DEVICE_TYPES.contains(&host.device_type(array)?);
            let token = host.shallow_copy(array)? as usize;
            let layout = Arc::new(AtomicU8::new(LAYOUT_UNKNOWN));
            let entry = Seen { chunk, holds: Holds::Handle(token), on_host, used: calls, bytes: len, unplain: false, probed: false, layout };
            seen.bytes += len;
            if let Some(old) = seen.by_handle.insert(array as usize, entry) {
                seen.bytes -= old.bytes;
                old.holds.release(host);
            }
            return Ok(None);
        }
        let Some(entry) = seen.by_handle.get_mut(&(array as usize)) else { return Ok(None) };
        entry.used = calls;
        if entry.unplain || !entry.on_host {
            return Ok(None);
        }
        if !entry.probed {
            // The second call: an array the program keeps. Staged once more, probed.
            entry.probed = true;
            probe(array, &entry.layout)?;
            return Ok(None);
        }
        if entry.layout.load(Ordering::Acquire) != LAYOUT_PLAIN {
            return Ok(None);
        }
        let ptr = host.data_ptr(array)?;
        if ptr.is_null() || !(ptr as usize).is_multiple_of(d.dtype.size()) {
            return Ok(None);
        }
        let reusable = matches!(&entry.holds, Holds::Native { ptr: p, dtype, shape, .. } if *p == ptr as usize && *dtype == d.dtype && *shape == d.shape);
        if !reusable {
            let token = match std::mem::replace(&mut entry.holds, Holds::Handle(0)) {
                Holds::Handle(h) if h != 0 => h,
                other => {
                    other.release(host);
                    host.shallow_copy(array)? as usize
                }
            };
            let native = NDArray::over_foreign(&dims(&d.shape), d.dtype, Box::new(LentBytes { ptr, len }))?;
            if !engine().bind_host_token(native.var(), token | LENT_TOKEN | OVER_MEMORY) {
                host.forget(token as NDArrayHandle);
                crate::bail!("the host's engine has shut down: no store call can run");
            }
            entry.holds = Holds::Native { ptr: ptr as usize, dtype: d.dtype, shape: d.shape.clone(), native };
        }
        let Holds::Native { native, .. } = &entry.holds else { return Ok(None) };
        let native = native.clone();
        drop(guard);
        self.by_chunk.insert(chunk, (array, native.clone()));
        Ok(Some(native))
    }
}

/// Queues a host op reading `array` (after the host ops queued before on it, such as the op
/// producing it) that records in `layout` whether the host then holds it in the plain layout:
/// an array a oneDNN operator writes in a blocked layout (recomputed into the same array call
/// after call) is found so and staged from then on, before it is ever lent.
fn probe(array: NDArrayHandle, layout: &Arc<AtomicU8>) -> Result<()> {
    let Some(host) = super::host() else { return Ok(()) };
    let mut copy = host.shallow_copy(array)?;
    let layout = Arc::clone(layout);
    let owned = copy as usize;
    let pushed = push_async(host, &[copy], &[], 0, (c"KVStoreProbe", Property::Normal), move |done| {
        let handle = owned as NDArrayHandle;
        let found = if not_plain(host, handle).is_some() { LAYOUT_ONEDNN } else { LAYOUT_PLAIN };
        layout.store(found, Ordering::Release);
        host.forget(handle);
        done.finish();
    });
    if pushed.is_err() {
        host.forget(std::mem::replace(&mut copy, std::ptr::null_mut()));
    }
    pushed
}

/// At op time, inside the host's engine: why the op must not run, where one of the lent
/// arrays (`handles`, their tokens) is no longer laid out plainly. The arrays found so are
/// staged from the store's next call on.
pub(super) fn unplain(host: &Host, handles: &[NDArrayHandle]) -> Option<String> {
    for &h in handles {
        if let Some(why) = not_plain(host, h) {
            UNPLAIN.lock().push(h as usize);
            ANY_UNPLAIN.store(true, Ordering::Release);
            return Some(format!(
                "a host array the store reads or writes in place was laid out anew by a host op queued before this one (the host says: {why}); \
                 wait for such arrays before passing them to the store, or set {ZERO_COPY_VAR}=0"
            ));
        }
    }
    None
}

/// The host's reason, where it holds `array` in a layout other than the plain one. Asks
/// without waiting (`MXNDArrayToDLPack` refuses a oneDNN layout); MXNet 1.9 keeps the small
/// tensor it had started to make when it refuses, so this is asked once per array at most
/// where the answer can be no (a probe, or an op that then marks the array staged).
fn not_plain(host: &Host, array: NDArrayHandle) -> Option<String> {
    let mut managed: *mut c_void = std::ptr::null_mut();
    // SAFETY: a live host handle and a live out-pointer; the host answers without waiting.
    let rc = unsafe { (host.api.to_dlpack)(array, &mut managed) };
    if rc != 0 {
        return Some(host.last_error());
    }
    // SAFETY: the tensor the host just made, handed back once.
    unsafe { (host.api.call_dlpack_deleter)(managed) };
    None
}
