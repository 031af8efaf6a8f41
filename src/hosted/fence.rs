//! Turns: host ops on memory the store's ops also use under other host dependencies. In
//! hosted mode the host's engine runs the store's ops too (`super::engine`), on tokens that
//! stand for the store's arrays; a host array over the same memory (`HostArray::over_native`)
//! is another dependency the host does not connect with the token. A [`host_turn`] connects
//! them for the host ops it runs: an op writing the arrays' handles and tokens (a no-op, in
//! the host's engine, so no thread is woken for it) opens the turn, after the store's ops on
//! the arrays, and another closes it, before the store's next ones. Staging arrays need no
//! turn: their token shares the host array's dependency (`Engine::bind_host_token`).
//!
//! A failure crosses as the host passes failures on: a failed op of the store's fails what
//! next writes its tokens (the opening op, and so the turn's ops, which fail their outputs);
//! a failed host op of the turn fails the closing op, and so the store's next op on the
//! arrays, which the store keeps for its next wait.

use super::async_op::{push_async, HostDone, Property};
use super::host::Host;
use super::lent::handle_of;
use crate::engine::engine;
use crate::ffi::NDArrayHandle;
use crate::{NDArray, Result};
use std::ffi::CStr;
use std::os::raw::c_int;

/// Runs `host_ops` (which queue host ops on the handles of `arrays`, each a native array and a
/// host handle over the same memory) in a turn: see the module's text. `name` names the op
/// that closes the turn (the one every turn has), as MXNet's profiler shows it. Returns once
/// everything is queued; an error of `host_ops` is returned after the turn is closed. The
/// opening op is always queued: the arrays may be waiting for host ops on their tokens (a
/// staging array's copies) that libkvstore's engine does not see.
pub(super) fn host_turn(
    host: &Host,
    name: &'static CStr,
    arrays: &[(NDArray, NDArrayHandle)],
    priority: c_int,
    host_ops: impl FnOnce() -> Result<()>,
) -> Result<()> {
    if arrays.is_empty() {
        return host_ops();
    }
    let mut handles: Vec<NDArrayHandle> = arrays.iter().map(|(_, h)| *h).collect();
    for (native, _) in arrays {
        let token = engine()
            .host_token(native.var())?
            .ok_or_else(|| crate::Error::new("the host's engine has shut down: no store call can run"))?;
        handles.push(handle_of(token));
    }
    // One array listed twice (a push's updaters may share one) would make the host's op wait
    // on itself.
    handles.sort_unstable();
    handles.dedup();
    let opened = push_async(host, &[], &handles, priority, (c"KVStoreHandOver", Property::Normal), HostDone::finish);
    let ran = opened.and_then(|()| host_ops());
    let closed = push_async(host, &[], &handles, priority, (name, Property::Normal), HostDone::finish);
    ran.and(closed)
}
