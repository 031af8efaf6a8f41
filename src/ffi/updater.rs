//! C updater callbacks as the store's updaters. Each call hands the callee two new handles
//! (recv, local) that it owns and must free, sharing memory with the summed and stored values.

use super::handle;
use super::types::{MXKVStoreServerController, MXKVStoreStrUpdater, MXKVStoreUpdater};
use crate::store::{IntUpdater, StrUpdater};
use std::os::raw::c_void;
use std::sync::Arc;

/// The user's opaque `updater_handle`, passed back unchanged. C owns what it points to; the
/// store only stores the address.
#[derive(Clone, Copy)]
struct UserData(usize);

impl UserData {
    fn ptr(self) -> *mut c_void {
        self.0 as *mut c_void
    }
}

/// The store's int updater calling `f`, or `None` when `f` is NULL (back to assignment).
pub(crate) fn int_updater(f: MXKVStoreUpdater, user: *mut c_void) -> Option<IntUpdater> {
    let f = f?;
    let user = UserData(user as usize);
    Some(Arc::new(move |key, recv, local| {
        let (recv, local) = (handle::new_ndarray(Some(recv)), handle::new_ndarray(Some(local)));
        // SAFETY: `f` is the callback the user installed with this signature; the handles are
        // live, and `user` is the pointer the user asked to get back.
        unsafe { f(key, recv, local, user.ptr()) }
    }))
}

/// The store's string updater calling `f`, or `None` when `f` is NULL.
pub(crate) fn str_updater(f: MXKVStoreStrUpdater, user: *mut c_void) -> Option<StrUpdater> {
    let f = f?;
    let user = UserData(user as usize);
    Some(Arc::new(move |key, recv, local| {
        let (recv, local) = (handle::new_ndarray(Some(recv)), handle::new_ndarray(Some(local)));
        // SAFETY: as for the int updater; `key` is a NUL-terminated string valid for the call.
        unsafe { f(key.as_ptr(), recv, local, user.ptr()) }
    }))
}

/// A server controller calling `f(cmd_id, cmd_body, controller_handle)`, or `None` for NULL.
pub(crate) fn controller(f: MXKVStoreServerController, user: *mut c_void) -> Option<crate::store::dist::Controller> {
    let f = f?;
    let user = UserData(user as usize);
    Some(Arc::new(move |id, body| {
        // SAFETY: `f` is the callback the user passed to RunServer with this signature; `body`
        // is a NUL-terminated string valid for the call; `user` is the user's own pointer.
        unsafe { f(id, body.as_ptr(), user.ptr()) }
    }))
}
