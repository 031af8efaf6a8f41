//! Fills the trampolines' slot table for hosted mode, or for a refused host.

use super::host::Host;
use crate::ffi::exports::{NAMES, SLOTS};
use std::os::raw::c_int;
use std::sync::atomic::Ordering;
use std::sync::OnceLock;

/// Names that stay libkvstore's own in hosted mode besides the store's calls: process-level
/// calls that need no host array.
const KEPT_NATIVE: [&str; 1] = ["MXInitPSEnv"];

/// The store's calls (`MXKVStore*`) stay libkvstore's own exports, which serve the hosted
/// store (see `crate::ffi::served`); `MXNotifyShutdown` goes to hosted mode's; every other
/// name to the host's function. A name the host does not export keeps libkvstore's
/// implementation or stub.
pub(super) fn route_to_host(host: &Host) {
    for (slot, name) in SLOTS.iter().zip(NAMES) {
        if KEPT_NATIVE.contains(&name) || name.starts_with("MXKVStore") {
            continue;
        }
        let target = match super::ffi::target(name) {
            Some(own) => Some(own),
            None => host.address(name),
        };
        if let Some(target) = target {
            slot.store(target, Ordering::Release);
        }
    }
}

static REFUSAL: OnceLock<String> = OnceLock::new();

/// Hosted mode was asked for but cannot run: every call but the error readers answers -1
/// with `why`, rather than silently running natively.
pub(super) fn refuse(why: &str) {
    let text = REFUSAL.get_or_init(|| format!("hosted mode refused: {why}"));
    eprintln!("libkvstore: {text}");
    const ERROR_READERS: [&str; 3] = ["MXGetLastError", "NNGetLastError", "NNAPISetLastError"];
    for (slot, name) in SLOTS.iter().zip(NAMES) {
        if !ERROR_READERS.contains(&name) {
            slot.store(refused as *mut (), Ordering::Release);
        }
    }
}

/// The target of every slot after a refusal. It reads no argument, so it serves every
/// signature (all the refused functions return int).
extern "C" fn refused() -> c_int {
    crate::ffi::record_error(
        "hosted mode",
        REFUSAL.get().map_or("refused", String::as_str),
    );
    -1
}
