//! Handles. MXNet's handles are `void*`; here each is a number from a registry, never a
//! pointer: an unknown, freed or wrong-kind handle is looked up, found missing and refused,
//! so no handle is ever dereferenced. Numbers are never reused, so a freed handle stays invalid.

use crate::error::Result;
use crate::ndarray::NDArray;
use crate::store::KVStore;
use once_cell::sync::Lazy;
use parking_lot::RwLock;
use std::collections::HashMap;
use std::os::raw::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// What an NDArray handle holds: an array, or nothing (`MXNDArrayCreateNone`).
pub(crate) type ArraySlot = Arc<RwLock<Option<NDArray>>>;

#[derive(Clone)]
enum Object {
    NDArray(ArraySlot),
    KVStore(Arc<KVStore>),
}

/// Handles are distinct multiples of 16 from a counter: a multiplicative hash spreads them
/// well, and is far cheaper than SipHash on a path taken for every array of every call.
#[derive(Default)]
struct HandleHasher(u64);

impl std::hash::Hasher for HandleHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 << 8 | *b as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_usize(&mut self, n: usize) {
        self.0 = ((n as u64) >> 4).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

type Registry = HashMap<usize, Object, std::hash::BuildHasherDefault<HandleHasher>>;

static REGISTRY: Lazy<RwLock<Registry>> = Lazy::new(|| RwLock::new(Registry::default()));
// Start high and step by 16 so handles look like aligned pointers to C code that prints them.
static NEXT: AtomicUsize = AtomicUsize::new(0x10_0000);

fn insert(object: Object) -> *mut c_void {
    let id = NEXT.fetch_add(16, Ordering::Relaxed);
    REGISTRY.write().insert(id, object);
    id as *mut c_void
}

fn lookup(handle: *mut c_void, arg: &str, want: &str) -> Result<Object> {
    lookup_in(&REGISTRY.read(), handle, &|| arg.to_string(), want)
}

/// `arg` names the argument in messages; it is only formatted on failure.
fn lookup_in(registry: &Registry, handle: *mut c_void, arg: &dyn Fn() -> String, want: &str) -> Result<Object> {
    crate::ensure!(!handle.is_null(), "{} is NULL", arg());
    match registry.get(&(handle as usize)) {
        Some(o) => Ok(o.clone()),
        None => crate::bail!("{} ({handle:p}) is not a live {want}: never created, or already freed", arg()),
    }
}

/// The arrays behind `handles` (`arg[i]` in messages), under one registry lock.
pub(crate) fn ndarrays(handles: &[*mut c_void], arg: &str) -> Result<Vec<NDArray>> {
    let registry = REGISTRY.read();
    handles
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let name = || format!("{arg}[{i}]");
            match lookup_in(&registry, *h, &name, "NDArrayHandle")? {
                Object::NDArray(slot) => slot.read().clone().ok_or_else(|| {
                    crate::Error::new(format!("{} ({h:p}) is an empty array (made by MXNDArrayCreateNone)", name()))
                }),
                Object::KVStore(_) => crate::bail!("{} ({h:p}) is a KVStoreHandle, not an NDArrayHandle", name()),
            }
        })
        .collect()
}

/// A new NDArray handle for `array` (`None`: an empty array).
pub(crate) fn new_ndarray(array: Option<NDArray>) -> *mut c_void {
    insert(Object::NDArray(Arc::new(RwLock::new(array))))
}

/// A new KVStore handle.
pub(crate) fn new_kvstore(store: KVStore) -> *mut c_void {
    insert(Object::KVStore(Arc::new(store)))
}

/// The slot behind an NDArray handle.
pub(crate) fn ndarray_slot(handle: *mut c_void, arg: &str) -> Result<ArraySlot> {
    match lookup(handle, arg, "NDArrayHandle")? {
        Object::NDArray(slot) => Ok(slot),
        Object::KVStore(_) => crate::bail!("{arg} ({handle:p}) is a KVStoreHandle, not an NDArrayHandle"),
    }
}

/// The array behind an NDArray handle; an empty array is refused.
pub(crate) fn ndarray(handle: *mut c_void, arg: &str) -> Result<NDArray> {
    let slot = ndarray_slot(handle, arg)?;
    let array = slot.read().clone();
    array.ok_or_else(|| crate::Error::new(format!("{arg} ({handle:p}) is an empty array (made by MXNDArrayCreateNone)")))
}

/// The store behind a KVStore handle.
pub(crate) fn kvstore(handle: *mut c_void, arg: &str) -> Result<Arc<KVStore>> {
    match lookup(handle, arg, "KVStoreHandle")? {
        Object::KVStore(store) => Ok(store),
        Object::NDArray(_) => crate::bail!("{arg} ({handle:p}) is an NDArrayHandle, not a KVStoreHandle"),
    }
}

/// Frees an NDArray handle (its memory lives on while other views or the store use it).
pub(crate) fn free_ndarray(handle: *mut c_void) -> Result<()> {
    ndarray_slot(handle, "handle")?;
    REGISTRY.write().remove(&(handle as usize));
    Ok(())
}

/// Frees a KVStore handle.
pub(crate) fn free_kvstore(handle: *mut c_void) -> Result<()> {
    kvstore(handle, "handle")?;
    REGISTRY.write().remove(&(handle as usize));
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
        assert!(kvstore(h, "h").unwrap_err().message().contains("is an NDArrayHandle"));
        assert!(ndarray(s, "s").unwrap_err().message().contains("is a KVStoreHandle"));
        free_ndarray(h).unwrap();
        assert!(ndarray(h, "h").unwrap_err().message().contains("already freed"));
        assert!(free_ndarray(h).is_err());
        assert!(ndarray(std::ptr::null_mut(), "h").unwrap_err().message().contains("NULL"));
        let none = new_ndarray(None);
        assert!(ndarray(none, "v").unwrap_err().message().contains("empty array"));
        free_kvstore(s).unwrap();
    }
}
