//! The arrays seam of the KVStore exports: a KVStore handle names the one store together with
//! the kind of array handle its calls take. Natively those are libkvstore's NDArray handles;
//! in hosted mode (`src/hosted/`) they are the host library's, which hosted mode carries
//! across. Every `MXKVStore*` export is written once, here in the FFI floor, for both.

use super::handle;
pub(crate) use super::served_store::ServedStore;
use super::types::{MXKVStoreStrUpdater, MXKVStoreUpdater, NDArrayHandle};
use super::updater;
use crate::error::Result;
use crate::store::{KVStore, Keys, Updaters};
use std::os::raw::{c_int, c_void};
use std::sync::{Arc, OnceLock};

/// The native store: libkvstore's NDArray handles, checked by the handle registry.
impl ServedStore for KVStore {
    fn store(&self) -> &KVStore {
        self
    }

    fn init(&self, keys: Keys, values: &[NDArrayHandle]) -> Result<()> {
        KVStore::init(self, keys, &handle::ndarrays(values, "vals")?)
    }

    fn push(&self, keys: Keys, values: &[NDArrayHandle], priority: c_int) -> Result<()> {
        KVStore::push_shared(self, keys, handle::shared_ndarrays(values, "vals")?, priority)
    }

    fn pull(&self, keys: Keys, outs: &[NDArrayHandle], priority: c_int, ignore_sparse: bool) -> Result<()> {
        KVStore::pull_shared(self, keys, handle::shared_ndarrays(outs, "vals")?, priority, ignore_sparse)
    }

    fn pull_row_sparse(&self, keys: Keys, outs: &[NDArrayHandle], row_ids: &[NDArrayHandle], priority: c_int) -> Result<()> {
        let outs = handle::ndarrays(outs, "vals")?;
        let row_ids = handle::ndarrays(row_ids, "row_ids")?;
        KVStore::pull_row_sparse(self, keys, &outs, &row_ids, priority)
    }

    fn push_pull(&self, (vkeys, okeys): (Keys, Keys), values: &[NDArrayHandle], outs: &[NDArrayHandle], priority: c_int) -> Result<()> {
        let values = handle::shared_ndarrays(values, "vals")?;
        let outs = handle::shared_ndarrays(outs, "outs")?;
        KVStore::push_pull_shared(self, vkeys, values, okeys, outs, priority)
    }

    fn broadcast(&self, (vkeys, okeys): (Keys, Keys), values: &[NDArrayHandle], outs: &[NDArrayHandle], priority: c_int) -> Result<()> {
        let values = handle::ndarrays(values, "vals")?;
        let outs = handle::ndarrays(outs, "outs")?;
        KVStore::broadcast(self, vkeys, &values, okeys, outs, priority)
    }

    fn updaters(&self, int: MXKVStoreUpdater, string: MXKVStoreStrUpdater, user: *mut c_void) -> Result<Option<Updaters>> {
        Ok(Some(Updaters { int: updater::int_updater(int, user), string: updater::str_updater(string, user) }))
    }
}

/// Makes a store of a type name for `MXKVStoreCreate`.
pub(crate) type StoreMaker = fn(&str) -> Result<Arc<dyn ServedStore>>;

static MAKER: OnceLock<StoreMaker> = OnceLock::new();

/// Makes every later `MXKVStoreCreate` serve another kind of array (hosted mode, set once when
/// the library loads, before any call).
pub(crate) fn serve_with(maker: StoreMaker) {
    let _ = MAKER.set(maker);
}

/// A new store of type `name`, as a new KVStore handle.
pub(crate) fn create(name: &str) -> Result<*mut c_void> {
    Ok(match MAKER.get() {
        Some(make) => handle::new_served_kvstore(make(name)?),
        None => handle::new_kvstore(KVStore::new(name)?),
    })
}
