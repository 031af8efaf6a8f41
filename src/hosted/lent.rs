//! Host arrays lent to the store in place: a plain dense CPU array of the host's is read (a
//! pushed value) or written (a pulled output) by the store's ops in the host array's own
//! memory, with no staging array and no copy. The native array over that memory has the host
//! array's own dependency as its token (a shallow copy of the host array, bound to its
//! variable): the host orders the store's ops with its own on the array directly, so the
//! array's next writer waits only for the store's read, and its readers wait for the pull.
//!
//! Which arrays: what the host reports decides, per array and per call. The array must be
//! dense, on a CPU context (`cpu`, `cpu_pinned`, `cpu_shared`), non-empty, of a dtype hosted
//! mode stores, with memory aligned to its element size. `MXNDArrayGetData` gives the memory,
//! first reordering a oneDNN-laid-out array into the plain layout (waiting for its writers,
//! as the host documents). Every other array crosses through a staging array (`super::store`).
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
use super::host::{Described, Host, DENSE};
use super::sparse::dims;
use crate::engine::engine;
use crate::ffi::NDArrayHandle;
use crate::ndarray::ForeignBytes;
use crate::{NDArray, Result};
use std::collections::HashMap;
use std::os::raw::c_void;

/// The bit that marks a lent array's token, so the host engine checks its layout at op time
/// ([`unplain`]). Tokens are host array handles, so their low bits are otherwise zero.
pub(super) const LENT_TOKEN: usize = 1;

/// The host array handle of a token (lent or not).
pub(super) fn handle_of(token: usize) -> NDArrayHandle {
    (token & !LENT_TOKEN) as NDArrayHandle
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

/// One call's lent arrays: each host chunk lent once, so one op never lists two tokens of one
/// host dependency (see the module's text).
#[derive(Default)]
pub(super) struct Lending {
    by_chunk: HashMap<usize, (NDArrayHandle, usize, NDArray)>,
}

impl Lending {
    /// A native array over `array`'s own memory, or `None` where it must be staged.
    pub fn lend(&mut self, host: &Host, array: NDArrayHandle, d: &Described) -> Result<Option<NDArray>> {
        if !enabled() || d.stype != DENSE || dl_type(d.dtype).is_err() || d.shape.iter().any(|&n| n <= 0) {
            return Ok(None);
        }
        let chunk = chunk_of(array);
        if let Some((handle, _, native)) = self.by_chunk.get(&chunk) {
            // The same handle again (a value that is also its output): the same native array.
            return Ok((*handle == array).then(|| native.clone()));
        }
        if !HOST_DEVICE_TYPES.contains(&host.device_type(array)?) {
            return Ok(None);
        }
        let ptr = host.data_ptr(array)?;
        let len = dims(&d.shape).iter().product::<usize>() * d.dtype.size();
        if ptr.is_null() || (ptr as usize) % d.dtype.size() != 0 {
            return Ok(None);
        }
        let native = NDArray::over_foreign(&dims(&d.shape), d.dtype, Box::new(LentBytes { ptr, len }))?;
        let token = host.shallow_copy(array)?;
        if !engine().bind_host_token(native.var(), token as usize | LENT_TOKEN) {
            host.forget(token);
            crate::bail!("the host's engine has shut down: no store call can run");
        }
        self.by_chunk.insert(chunk, (array, ptr as usize, native.clone()));
        Ok(Some(native))
    }
}

/// At op time, inside the host's engine: why the op must not run, where one of the lent
/// arrays (`handles`, their tokens) is no longer laid out plainly.
pub(super) fn unplain(host: &Host, handles: &[NDArrayHandle]) -> Option<String> {
    for &h in handles {
        let mut managed: *mut c_void = std::ptr::null_mut();
        // SAFETY: a live token (its variable holds it while the op is queued) and a live
        // out-pointer; the host answers without waiting (it refuses a oneDNN layout).
        let rc = unsafe { (host.api.to_dlpack)(h, &mut managed) };
        if rc != 0 {
            return Some(format!(
                "a host array the store reads or writes in place was laid out anew by a host op queued before this one (the host says: {}); \
                 wait for such arrays before passing them to the store, or set {ZERO_COPY_VAR}=0",
                host.last_error()
            ));
        }
        // SAFETY: the tensor the host just made, handed back once.
        unsafe { (host.api.call_dlpack_deleter)(managed) };
    }
    None
}
