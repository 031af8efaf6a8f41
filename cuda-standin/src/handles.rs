//! Opaque handles (CUcontext, CUstream, CUevent, CUmodule, CUfunction, CUmemoryPool): numbers
//! looked up in a table, never pointers the caller could make the stand-in dereference, so a
//! stale or forged handle is answered with an error instead of undefined behaviour.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Handle values of every kind come from one counter, far above the stream sentinels 0/1/2.
static NEXT: AtomicU64 = AtomicU64::new(0x5ca1_0000);

/// A fresh handle value, unique across all kinds for the life of the process.
pub fn next_handle() -> u64 {
    NEXT.fetch_add(0x10, Ordering::Relaxed)
}

/// The live objects of one kind by handle.
pub struct Table<T> {
    map: Mutex<Option<HashMap<u64, Arc<T>>>>,
}

impl<T> Table<T> {
    pub const fn new() -> Self {
        Table { map: Mutex::new(None) }
    }

    pub fn insert(&self, handle: u64, object: Arc<T>) {
        self.map.lock().get_or_insert_with(HashMap::new).insert(handle, object);
    }

    pub fn get(&self, handle: u64) -> Option<Arc<T>> {
        self.map.lock().as_ref().and_then(|m| m.get(&handle).cloned())
    }

    pub fn remove(&self, handle: u64) -> Option<Arc<T>> {
        self.map.lock().as_mut().and_then(|m| m.remove(&handle))
    }

    /// Every live object for which `keep` is true.
    pub fn filter(&self, keep: impl Fn(&T) -> bool) -> Vec<Arc<T>> {
        self.map.lock().as_ref().map(|m| m.values().filter(|o| keep(o)).cloned().collect()).unwrap_or_default()
    }
}
