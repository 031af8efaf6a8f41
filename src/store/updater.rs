//! Updaters: what a push does with the summed value when the user installed one.

use crate::ndarray::NDArray;
use std::ffi::CStr;
use std::sync::Arc;

/// `updater(key, recv, local)` for int keys (or internal ids of a string-key store).
pub type IntUpdater = Arc<dyn Fn(i32, NDArray, NDArray) + Send + Sync>;
/// `updater(key, recv, local)` for string keys.
pub type StrUpdater = Arc<dyn Fn(&CStr, NDArray, NDArray) + Send + Sync>;

/// The installed updaters; none means pushes assign the sum.
#[derive(Clone, Default)]
pub struct Updaters {
    /// Installed by `SetUpdater` and `SetUpdaterEx`.
    pub int: Option<IntUpdater>,
    /// Installed by `SetUpdaterEx`.
    pub string: Option<StrUpdater>,
}

/// The key an updater call receives.
pub enum UpdaterKey {
    /// An int key, or a string-key store's internal id when no string updater is set.
    Int(i32),
    /// A string key.
    Str(std::ffi::CString),
}

impl Updaters {
    /// Whether a push to a store of this key family calls an updater.
    pub fn active(&self, string_keys: bool) -> bool {
        self.int.is_some() || (string_keys && self.string.is_some())
    }

    /// Calls the updater MXNet would call for this key.
    pub fn call(&self, key: &UpdaterKey, recv: NDArray, local: NDArray) {
        match (key, &self.string, &self.int) {
            (UpdaterKey::Str(name), Some(f), _) => f(name, recv, local),
            (UpdaterKey::Str(_), None, _) => {}
            (UpdaterKey::Int(k), _, Some(f)) => f(*k, recv, local),
            (UpdaterKey::Int(_), _, None) => {}
        }
    }

    /// The key to pass for internal id `id`, given the store's string name for it if any.
    pub fn key_for(&self, id: i32, name: Option<&std::ffi::CString>) -> UpdaterKey {
        match (name, &self.string) {
            (Some(n), Some(_)) => UpdaterKey::Str(n.clone()),
            _ => UpdaterKey::Int(id),
        }
    }
}
