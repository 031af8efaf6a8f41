//! The trait of the arrays seam (`super::served`): what a KVStore handle holds. Its own file
//! so that the handle registry, which stores it, and `served`, which decodes handles, do not
//! import each other.

use super::types::{MXKVStoreStrUpdater, MXKVStoreUpdater, NDArrayHandle};
use crate::error::Result;
use crate::store::{KVStore, Keys, Updaters};
use std::os::raw::{c_int, c_void};

/// A store and the arrays its calls take.
pub(crate) trait ServedStore: Send + Sync {
    /// The store, for the calls that take no arrays.
    fn store(&self) -> &KVStore;
    fn init(&self, keys: Keys, values: &[NDArrayHandle]) -> Result<()>;
    fn push(&self, keys: Keys, values: &[NDArrayHandle], priority: c_int) -> Result<()>;
    fn pull(&self, keys: Keys, outs: &[NDArrayHandle], priority: c_int, ignore_sparse: bool) -> Result<()>;
    fn pull_row_sparse(&self, keys: Keys, outs: &[NDArrayHandle], row_ids: &[NDArrayHandle], priority: c_int) -> Result<()>;
    fn push_pull(&self, keys: (Keys, Keys), values: &[NDArrayHandle], outs: &[NDArrayHandle], priority: c_int) -> Result<()>;
    fn broadcast(&self, keys: (Keys, Keys), values: &[NDArrayHandle], outs: &[NDArrayHandle], priority: c_int) -> Result<()>;
    /// The store's updaters calling the C updaters `int` and `string` with arrays of this
    /// kind; `None` where the store keeps what it has (a hosted dist worker's, never called).
    fn updaters(&self, int: MXKVStoreUpdater, string: MXKVStoreStrUpdater, user: *mut c_void) -> Result<Option<Updaters>>;
}
