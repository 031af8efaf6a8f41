//! Handles: every `void*` libkvstore hands out, encoded and decoded here and nowhere else.
//! None is a pointer, so no handle is ever dereferenced. The low four bits say what a handle
//! is: 0 for an NDArray or KVStore handle, a slot number and a generation from a registry (an
//! unknown, freed or wrong-kind handle is looked up, found missing and refused; a freed slot
//! is reused with the next generation, so a stale handle to it stays invalid); a tag for a
//! token naming a static entry (an operator, a data iterator), which lives for the process.

use crate::error::Result;
use crate::ndarray::NDArray;
use super::served_store::ServedStore;
use crate::store::KVStore;
use once_cell::sync::Lazy;
use parking_lot::{Mutex, RwLock};
use std::os::raw::c_void;
use std::sync::Arc;

/// What a handle holds. An NDArray handle holds its array inline (or nothing, for
/// `MXNDArrayCreateNone`): calls pass thousands of arrays, and reading them from consecutive
/// slots, with no lock or pointer per array, is what keeps a call's cost per array low.
#[derive(Clone)]
enum Object {
    NDArray(Option<NDArray>),
    KVStore(Arc<KVStore>),
    /// A store serving another kind of array (hosted mode's, `super::served`).
    ServedKVStore(Arc<dyn ServedStore>),
    Profile(crate::profiler::objects::Handle),
}

impl Object {
    fn kind(&self) -> &'static str {
        match self {
            Object::NDArray(_) => "an NDArrayHandle",
            Object::KVStore(_) | Object::ServedKVStore(_) => "a KVStoreHandle",
            Object::Profile(_) => "a ProfileHandle",
        }
    }
}

// A handle is `generation << GEN_SHIFT | (index + 1) << 4`: never NULL, 16-byte aligned like
// a pointer, and O(1) to resolve, which matters for calls passing thousands of arrays.
const GEN_SHIFT: u32 = 36;
const INDEX_MASK: usize = (1 << (GEN_SHIFT - 4)) - 1;

struct Slot {
    generation: usize,
    object: Option<Object>,
}

#[derive(Default)]
struct Registry {
    slots: Vec<Slot>,
    free: Vec<usize>,
    /// NDArray handles freed so far: while it stays the same, every NDArray handle that was
    /// live stays live with the same array (an empty one may only be filled), which
    /// [`RecentCalls`] relies on.
    frees: u64,
}

impl Registry {
    fn get(&self, handle: *mut c_void) -> Option<&Object> {
        let h = handle as usize;
        let index = ((h >> 4) & INDEX_MASK).checked_sub(1)?;
        let slot = self.slots.get(index)?;
        (h & 0xF == 0 && slot.generation == h >> GEN_SHIFT).then_some(slot.object.as_ref()?)
    }

    /// Hints that the slot of `handle` will be read soon (nothing for a handle out of range).
    fn prefetch(&self, handle: *mut c_void) {
        let index = ((handle as usize >> 4) & INDEX_MASK).wrapping_sub(1);
        if index < self.slots.len() {
            crate::base::prefetch::prefetch_line(self.slots.as_ptr().wrapping_add(index));
        }
    }

    fn get_mut(&mut self, handle: *mut c_void) -> Option<&mut Object> {
        let h = handle as usize;
        let index = ((h >> 4) & INDEX_MASK).checked_sub(1)?;
        let slot = self.slots.get_mut(index)?;
        (h & 0xF == 0 && slot.generation == h >> GEN_SHIFT).then_some(slot.object.as_mut()?)
    }

    fn insert(&mut self, object: Object) -> *mut c_void {
        let index = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push(Slot { generation: 0, object: None });
                self.slots.len() - 1
            }
        };
        let slot = &mut self.slots[index];
        slot.object = Some(object);
        (slot.generation << GEN_SHIFT | (index + 1) << 4) as *mut c_void
    }

    fn remove(&mut self, handle: *mut c_void) {
        let index = ((handle as usize >> 4) & INDEX_MASK) - 1;
        let slot = &mut self.slots[index];
        slot.object = None;
        // Retire the slot for good once its generations run out, rather than reuse a number.
        slot.generation += 1;
        if slot.generation < 1 << (usize::BITS - GEN_SHIFT) {
            self.free.push(index);
        }
    }
}

/// What a token names; the discriminant is its tag in the low four bits.
#[derive(Debug, Clone, Copy)]
pub(crate) enum TokenKind {
    /// A data-iterator creator (`DataIterCreator`).
    DataIter = 4,
    /// An operator (`AtomicSymbolCreator`, nnvm's `OpHandle`).
    Op = 8,
}

/// The token for entry `index` of a static table: `(index + 1) << 4 | tag`, never NULL.
pub(crate) fn token(kind: TokenKind, index: usize) -> usize {
    (index + 1) << 4 | kind as usize
}

/// The entry index behind a token of `kind`, if `handle` is one and the index is below `len`.
pub(crate) fn token_index(kind: TokenKind, handle: *mut c_void, len: usize) -> Option<usize> {
    let h = handle as usize;
    (h & 0xF == kind as usize).then(|| (h >> 4).checked_sub(1)).flatten().filter(|i| *i < len)
}

static REGISTRY: Lazy<RwLock<Registry>> = Lazy::new(|| RwLock::new(Registry::default()));

fn lookup(handle: *mut c_void, arg: &str, want: &str) -> Result<Object> {
    lookup_in(&REGISTRY.read(), handle, &|| arg.to_string(), want)
}

/// `arg` names the argument in messages; it is only formatted on failure.
fn lookup_in(registry: &Registry, handle: *mut c_void, arg: &dyn Fn() -> String, want: &str) -> Result<Object> {
    crate::ensure!(!handle.is_null(), "{} is NULL", arg());
    match registry.get(handle) {
        Some(o) => Ok(o.clone()),
        None => crate::bail!("{} ({handle:p}) is not a live {want}: never created, or already freed", arg()),
    }
}

/// The arrays behind `handles` (`arg[i]` in messages), under one registry lock and without
/// cloning registry entries: this runs for every array of every call.
pub(crate) fn ndarrays(handles: &[*mut c_void], arg: &str) -> Result<Vec<NDArray>> {
    decode(&REGISTRY.read(), handles, arg)
}

fn decode(registry: &Registry, handles: &[*mut c_void], arg: &str) -> Result<Vec<NDArray>> {
    let mut arrays = Vec::with_capacity(handles.len());
    for (i, h) in handles.iter().enumerate() {
        // The slot a few handles ahead, and the reference count of the array behind the
        // handle half as far ahead (its slot was asked for earlier): the clones' locked
        // increments then mostly hit.
        const AHEAD: usize = 8;
        if let Some(ahead) = handles.get(i + 2 * AHEAD) {
            registry.prefetch(*ahead);
        }
        if let Some(Object::NDArray(Some(a))) = handles.get(i + AHEAD).and_then(|h| registry.get(*h)) {
            a.prefetch_clone();
        }
        let array = match registry.get(*h) {
            Some(Object::NDArray(array)) => array.clone(),
            _ => None,
        };
        match array {
            Some(a) => arrays.push(a),
            // Slow path, for the message.
            None => {
                let name = || format!("{arg}[{i}]");
                match lookup_in(registry, *h, &name, "NDArrayHandle")? {
                    Object::NDArray(_) => crate::bail!("{} ({h:p}) is an empty array (made by MXNDArrayCreateNone)", name()),
                    other => crate::bail!("{} ({h:p}) is {}, not an NDArrayHandle", name(), other.kind()),
                }
            }
        }
    }
    Ok(arrays)
}

/// The arrays of the last few calls that passed many handles, by their handle lists. A
/// training loop passes the same handles every iteration; handing it the vector decoded last
/// time, shared, spares a reference count per array on the calling thread and its release on
/// the worker that drops the call's ops (two locked instructions on lines the workers also
/// use). Emptied whenever a handle is freed: a freed handle is then refused as before, and no
/// array outlives its last handle by sitting here.
#[derive(Default)]
struct RecentCalls {
    /// The registry's `frees` when this was last emptied: a decoding from before then must not
    /// come in.
    frees: u64,
    calls: Vec<Decoded>,
    /// The entry the next decoding replaces, once `calls` is full.
    next: usize,
}

struct Decoded {
    handles: Box<[usize]>,
    arrays: Arc<Vec<NDArray>>,
}

/// Calls passing fewer arrays are decoded each time: a few reference counts cost less than
/// keeping and comparing their lists.
const RECENT_MIN_HANDLES: usize = 64;
/// Handle lists kept: a push's values and a pull's outputs, and a few more.
const RECENT_CALLS: usize = 4;

impl RecentCalls {
    fn find(&self, handles: &[*mut c_void]) -> Option<Arc<Vec<NDArray>>> {
        let same = |d: &&Decoded| d.handles.len() == handles.len() && d.handles.iter().zip(handles).all(|(a, b)| *a == *b as usize);
        self.calls.iter().find(same).map(|d| Arc::clone(&d.arrays))
    }

    /// Keeps `arrays`, decoded from `handles` when the registry had seen `frees` frees, unless
    /// a handle was freed since; returns what it displaced (to drop outside the lock).
    fn keep(&mut self, handles: &[*mut c_void], arrays: &Arc<Vec<NDArray>>, frees: u64) -> Option<Decoded> {
        if frees != self.frees {
            return None;
        }
        let decoded = Decoded { handles: handles.iter().map(|h| *h as usize).collect(), arrays: Arc::clone(arrays) };
        if self.calls.len() < RECENT_CALLS {
            self.calls.push(decoded);
            return None;
        }
        let at = self.next;
        self.next = (at + 1) % RECENT_CALLS;
        Some(std::mem::replace(&mut self.calls[at], decoded))
    }

    /// Forgets every call, as of the registry's `frees`; returns them (to drop outside the
    /// locks: dropping arrays may free their memory).
    fn forget(&mut self, frees: u64) -> Vec<Decoded> {
        self.frees = frees;
        self.next = 0;
        std::mem::take(&mut self.calls)
    }
}

static RECENT: Lazy<Mutex<RecentCalls>> = Lazy::new(|| Mutex::new(RecentCalls::default()));

/// [`ndarrays`], shared: a list of handles equal to one of the last few calls' (and no handle
/// freed since) gets the vector decoded then, with no work per array.
pub(crate) fn shared_ndarrays(handles: &[*mut c_void], arg: &str) -> Result<Arc<Vec<NDArray>>> {
    if handles.len() < RECENT_MIN_HANDLES {
        return ndarrays(handles, arg).map(Arc::new);
    }
    if let Some(arrays) = RECENT.lock().find(handles) {
        return Ok(arrays);
    }
    let (arrays, frees) = {
        let registry = REGISTRY.read();
        (decode(&registry, handles, arg)?, registry.frees)
    };
    let arrays = Arc::new(arrays);
    let displaced = RECENT.lock().keep(handles, &arrays, frees);
    drop(displaced);
    Ok(arrays)
}

/// A new NDArray handle for `array` (`None`: an empty array).
pub(crate) fn new_ndarray(array: Option<NDArray>) -> *mut c_void {
    REGISTRY.write().insert(Object::NDArray(array))
}

/// A new KVStore handle.
pub(crate) fn new_kvstore(store: KVStore) -> *mut c_void {
    REGISTRY.write().insert(Object::KVStore(Arc::new(store)))
}

/// The array behind an NDArray handle, or `None` for an empty array.
pub(crate) fn ndarray_or_empty(handle: *mut c_void, arg: &str) -> Result<Option<NDArray>> {
    match lookup(handle, arg, "NDArrayHandle")? {
        Object::NDArray(array) => Ok(array),
        other => crate::bail!("{arg} ({handle:p}) is {}, not an NDArrayHandle", other.kind()),
    }
}

/// The array behind an NDArray handle; an empty array is refused.
pub(crate) fn ndarray(handle: *mut c_void, arg: &str) -> Result<NDArray> {
    let array = ndarray_or_empty(handle, arg)?;
    array.ok_or_else(|| crate::Error::new(format!("{arg} ({handle:p}) is an empty array (made by MXNDArrayCreateNone)")))
}

/// Gives `array` to each handle that holds an empty array (an op's outputs made by
/// `MXNDArrayCreateNone`); handles holding an array keep it. The handles were checked live.
pub(crate) fn fill_empty(handles: &[*mut c_void], arrays: &[NDArray]) {
    let mut registry = REGISTRY.write();
    for (h, array) in handles.iter().zip(arrays) {
        if let Some(Object::NDArray(slot @ None)) = registry.get_mut(*h) {
            *slot = Some(array.clone());
        }
    }
}

/// The store behind a KVStore handle, with the arrays its calls take.
pub(crate) fn served_kvstore(handle: *mut c_void, arg: &str) -> Result<Arc<dyn ServedStore>> {
    match lookup(handle, arg, "KVStoreHandle")? {
        Object::KVStore(store) => Ok(store),
        Object::ServedKVStore(store) => Ok(store),
        other => crate::bail!("{arg} ({handle:p}) is {}, not a KVStoreHandle", other.kind()),
    }
}

/// Frees an NDArray handle (its memory lives on while other views or the store use it).
pub(crate) fn free_ndarray(handle: *mut c_void) -> Result<()> {
    let mut registry = REGISTRY.write();
    match lookup_in(&registry, handle, &|| "handle".to_string(), "NDArrayHandle")? {
        Object::NDArray(_) => registry.remove(handle),
        other => crate::bail!("handle ({handle:p}) is {}, not an NDArrayHandle", other.kind()),
    }
    registry.frees += 1;
    // Under the registry's lock: a call decoding after this returns finds none of them.
    let forgotten = RECENT.lock().forget(registry.frees);
    drop(registry);
    drop(forgotten);
    Ok(())
}

/// Frees a KVStore handle.
pub(crate) fn free_kvstore(handle: *mut c_void) -> Result<()> {
    let mut registry = REGISTRY.write();
    let object: Arc<dyn ServedStore> = match lookup_in(&registry, handle, &|| "handle".to_string(), "KVStoreHandle")? {
        Object::KVStore(store) => store,
        Object::ServedKVStore(store) => store,
        other => crate::bail!("handle ({handle:p}) is {}, not a KVStoreHandle", other.kind()),
    };
    registry.remove(handle);
    drop(registry);
    // The store's last reference may go here: drop it outside the registry lock.
    drop(object);
    Ok(())
}

/// A new KVStore handle for a store serving another kind of array: checked (unknown, freed
/// and wrong-kind handles refused) as native ones are.
pub(crate) fn new_served_kvstore(store: Arc<dyn ServedStore>) -> *mut c_void {
    REGISTRY.write().insert(Object::ServedKVStore(store))
}

/// A new ProfileHandle.
pub(crate) fn new_profile(object: crate::profiler::objects::Handle) -> *mut c_void {
    REGISTRY.write().insert(Object::Profile(object))
}

/// The profiling object behind a ProfileHandle.
pub(crate) fn profile(handle: *mut c_void, arg: &str) -> Result<crate::profiler::objects::Handle> {
    match lookup(handle, arg, "ProfileHandle")? {
        Object::Profile(p) => Ok(p),
        other => crate::bail!("{arg} ({handle:p}) is {}, not a ProfileHandle", other.kind()),
    }
}

/// Frees a ProfileHandle.
pub(crate) fn free_profile(handle: *mut c_void, arg: &str) -> Result<()> {
    let mut registry = REGISTRY.write();
    match lookup_in(&registry, handle, &|| arg.to_string(), "ProfileHandle")? {
        Object::Profile(_) => registry.remove(handle),
        other => crate::bail!("{arg} ({handle:p}) is {}, not a ProfileHandle", other.kind()),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ndarray::{Context, DType};

    #[test]
    fn freed_unknown_and_wrong_kind_handles_are_refused() {
        let a = NDArray::zeros(&[1], Context::cpu(0), DType::Float32).unwrap();
        let h = new_ndarray(Some(a));
        assert!(ndarray(h, "h").is_ok());
        let s = new_kvstore(KVStore::new("local").unwrap());
        assert!(served_kvstore(h, "h").err().unwrap().message().contains("is an NDArrayHandle"));
        assert!(ndarray(s, "s").unwrap_err().message().contains("is a KVStoreHandle"));
        free_ndarray(h).unwrap();
        assert!(ndarray(h, "h").unwrap_err().message().contains("already freed"));
        assert!(free_ndarray(h).is_err());
        // The slot is reused with a new generation: the stale handle stays refused.
        let reused = new_ndarray(None);
        assert_ne!(reused, h);
        assert!(ndarray(h, "h").unwrap_err().message().contains("already freed"));
        assert!(ndarray(std::ptr::null_mut(), "h").unwrap_err().message().contains("NULL"));
        assert!(ndarray(reused, "v").unwrap_err().message().contains("empty array"));
        assert!(ndarray((h as usize + 3) as *mut c_void, "odd").is_err());
        assert!(ndarray(usize::MAX as *mut c_void, "max").is_err());
        free_kvstore(s).unwrap();
    }

    #[test]
    fn recent_calls_keep_only_decodings_from_after_the_last_free_and_drop_the_oldest() {
        let mut recent = RecentCalls::default();
        let handle = |i: usize| ((i + 1) << 4) as *mut c_void;
        let handles: Vec<_> = (0..3).map(handle).collect();
        let arrays = Arc::new(Vec::new());
        recent.forget(5);
        assert!(recent.keep(&handles, &arrays, 4).is_none());
        assert!(recent.find(&handles).is_none(), "decoded before the last free: not kept");
        recent.keep(&handles, &arrays, 5);
        assert!(recent.find(&handles).is_some_and(|a| Arc::ptr_eq(&a, &arrays)));
        assert!(recent.find(&handles[..2]).is_none() && recent.find(&[handle(0), handle(2), handle(1)]).is_none());
        for i in 0..RECENT_CALLS - 1 {
            assert!(recent.keep(&[handle(10 + i)], &Arc::new(Vec::new()), 5).is_none());
        }
        assert!(recent.find(&handles).is_some());
        let displaced = recent.keep(&[handle(20)], &Arc::new(Vec::new()), 5);
        assert!(displaced.is_some_and(|d| Arc::ptr_eq(&d.arrays, &arrays)), "full: the oldest goes");
        assert!(recent.find(&handles).is_none() && recent.find(&[handle(20)]).is_some());
        assert_eq!(recent.forget(6).len(), RECENT_CALLS);
        assert!(recent.find(&[handle(20)]).is_none());
    }
}
