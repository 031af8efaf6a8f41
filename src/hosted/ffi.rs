//! Hosted mode's own C function: `MXNotifyShutdown`. Every `MXKVStore*` export is native
//! mode's (`src/ffi/kvstore.rs`), serving the hosted store through the FFI floor's arrays seam
//! (`crate::ffi::served`); errors reach the host's last error through the mirror installed at
//! load.

#![allow(non_snake_case)]

use std::os::raw::c_int;

/// Drains the host's work, the store's included, then shuts the host down.
extern "C" fn MXNotifyShutdown() -> c_int {
    let Some(host) = super::host() else { return -1 };
    // SAFETY: the host's MXNDArrayWaitAll and MXNotifyShutdown take no arguments.
    unsafe {
        (host.api.wait_all)();
        super::SHUT_DOWN.store(true, std::sync::atomic::Ordering::Release);
        (host.api.notify_shutdown)()
    }
}

/// The hosted target of the trampoline `name`, for the names hosted mode serves itself.
pub(super) fn target(name: &str) -> Option<*mut ()> {
    (name == "MXNotifyShutdown").then_some(MXNotifyShutdown as *mut ())
}
