//! The hosted store's C functions: the targets of the `MXKVStore*` trampolines in hosted mode,
//! with MXNet 1.9's prototypes. Errors go to the host's last error (`NNAPISetLastError`),
//! which the frontend reads through the forwarded `MXGetLastError`.

#![allow(non_snake_case)]

use super::host::Host;
use super::key::Key;
use super::store::HostedStore;
use crate::ffi::{mx_uint, KVStoreHandle, MXKVStoreStrUpdater, MXKVStoreUpdater, NDArrayHandle};
use crate::ffi::handle;
use crate::Result;
use std::ffi::CStr;
use std::os::raw::{c_char, c_int, c_void};
use std::sync::Arc;

/// Runs a hosted export's body: errors and panics become -1 with the message in the host's
/// last error, prefixed with `name` (the export's, from `hosted_export!`).
fn call(name: impl FnOnce() -> &'static str, body: impl FnOnce(&'static Host) -> Result<()>) -> c_int {
    let Some(host) = super::host() else { return -1 };
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| body(host))) {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => {
            host.set_last_error(&format!("MXNetError: {}: {}", name(), e.message()));
            -1
        }
        Err(_) => {
            host.set_last_error(&format!("MXNetError: {}: internal error (panic)", name()));
            -1
        }
    }
}

/// Wraps the body of a hosted export, as `ffi_boundary!` does native ones: the name in its
/// error messages is the enclosing function's, found by the compiler.
macro_rules! hosted_export {
    ($body:expr) => {{
        fn here() {}
        call(|| crate::ffi::boundary::export_name(::std::any::type_name_of_val(&here)), $body)
    }};
}

/// The store behind `handle`, from libkvstore's handle registry: an unknown, freed or
/// wrong-kind handle is refused, as native ones are, and a call holds the store alive.
fn store(h: KVStoreHandle) -> Result<Arc<HostedStore>> {
    handle::hosted_kvstore(h, "handle")?
        .downcast::<HostedStore>()
        .map_err(|_| crate::Error::new(format!("handle ({h:p}) is not a hosted store")))
}

fn handles<'a>(ptr: *mut NDArrayHandle, n: u32, what: &str) -> Result<&'a [NDArrayHandle]> {
    if n == 0 {
        return Ok(&[]);
    }
    crate::ensure!(!ptr.is_null(), "{what} is NULL with {n} entries");
    // SAFETY: the caller passes `n` handles at `ptr` (MXNet's contract).
    Ok(unsafe { std::slice::from_raw_parts(ptr, n as usize) })
}

fn int_keys(ptr: *const c_int, n: u32) -> Result<Vec<Key>> {
    if n == 0 {
        return Ok(Vec::new());
    }
    crate::ensure!(!ptr.is_null(), "keys is NULL with {n} entries");
    // SAFETY: `n` ints at `ptr`.
    Ok(unsafe { std::slice::from_raw_parts(ptr, n as usize) }
        .iter()
        .map(|&k| Key::Int(k))
        .collect())
}

/// `n` NUL-terminated UTF-8 strings at `ptr` (`what` names them in errors).
fn strings(ptr: *const *const c_char, n: u32, what: &str) -> Result<Vec<String>> {
    if n == 0 {
        return Ok(Vec::new());
    }
    crate::ensure!(!ptr.is_null(), "{what} is NULL with {n} entries");
    // SAFETY: `n` string pointers at `ptr`.
    let ptrs = unsafe { std::slice::from_raw_parts(ptr, n as usize) };
    ptrs.iter()
        .map(|&p| {
            crate::ensure!(!p.is_null(), "an entry of {what} is NULL");
            // SAFETY: NUL-terminated strings (MXNet's contract).
            let s = unsafe { CStr::from_ptr(p) }
                .to_str()
                .map_err(|_| crate::Error::new(format!("an entry of {what} is not UTF-8")))?;
            Ok(s.to_string())
        })
        .collect()
}

fn str_keys(ptr: *const *const c_char, n: u32) -> Result<Vec<Key>> {
    Ok(strings(ptr, n, "keys")?.into_iter().map(Key::Str).collect())
}

extern "C" fn MXKVStoreCreate(r#type: *const c_char, out: *mut KVStoreHandle) -> c_int {
    hosted_export!(|_| {
        crate::ensure!(
            !r#type.is_null() && !out.is_null(),
            "type and out must not be NULL"
        );
        // SAFETY: a NUL-terminated string (checked non-NULL).
        let name = unsafe { CStr::from_ptr(r#type) }.to_string_lossy();
        let store: Arc<dyn std::any::Any + Send + Sync> = Arc::new(HostedStore::new(&name)?);
        // SAFETY: checked non-NULL.
        unsafe { *out = handle::new_hosted_kvstore(store) };
        Ok(())
    })
}

extern "C" fn MXKVStoreFree(handle: KVStoreHandle) -> c_int {
    hosted_export!(|host| {
        store(handle)?;
        let freed = handle::free_hosted_kvstore(handle)?;
        // A call racing the free (the C contract forbids it) still holds the store: it is
        // then released, unwaited, when that call ends.
        if let Some(store) = freed.downcast::<HostedStore>().ok().and_then(Arc::into_inner) {
            store.free(host);
        }
        Ok(())
    })
}

extern "C" fn MXKVStoreInit(
    handle: KVStoreHandle,
    num: u32,
    keys: *const c_int,
    vals: *mut NDArrayHandle,
) -> c_int {
    hosted_export!(|h| {
        store(handle)?.init(h, int_keys(keys, num)?, handles(vals, num, "vals")?)
    })
}
extern "C" fn MXKVStoreInitEx(
    handle: KVStoreHandle,
    num: u32,
    keys: *mut *const c_char,
    vals: *mut NDArrayHandle,
) -> c_int {
    hosted_export!(|h| {
        store(handle)?.init(h, str_keys(keys, num)?, handles(vals, num, "vals")?)
    })
}
extern "C" fn MXKVStorePush(
    handle: KVStoreHandle,
    num: u32,
    keys: *const c_int,
    vals: *mut NDArrayHandle,
    priority: c_int,
) -> c_int {
    hosted_export!(|h| {
        store(handle)?.push(
            h,
            int_keys(keys, num)?,
            handles(vals, num, "vals")?,
            priority,
        )
    })
}
extern "C" fn MXKVStorePushEx(
    handle: KVStoreHandle,
    num: u32,
    keys: *mut *const c_char,
    vals: *mut NDArrayHandle,
    priority: c_int,
) -> c_int {
    hosted_export!(|h| {
        store(handle)?.push(
            h,
            str_keys(keys, num)?,
            handles(vals, num, "vals")?,
            priority,
        )
    })
}
extern "C" fn MXKVStorePull(
    handle: KVStoreHandle,
    num: u32,
    keys: *const c_int,
    vals: *mut NDArrayHandle,
    priority: c_int,
) -> c_int {
    hosted_export!(|h| {
        store(handle)?.pull(h, int_keys(keys, num)?, handles(vals, num, "vals")?, priority, true)
    })
}
extern "C" fn MXKVStorePullEx(
    handle: KVStoreHandle,
    num: u32,
    keys: *mut *const c_char,
    vals: *mut NDArrayHandle,
    priority: c_int,
) -> c_int {
    hosted_export!(|h| {
        store(handle)?.pull(h, str_keys(keys, num)?, handles(vals, num, "vals")?, priority, true)
    })
}
extern "C" fn MXKVStorePullWithSparse(
    handle: KVStoreHandle,
    num: u32,
    keys: *const c_int,
    vals: *mut NDArrayHandle,
    priority: c_int,
    ignore_sparse: bool,
) -> c_int {
    hosted_export!(|h| {
        store(handle)?.pull(
            h,
            int_keys(keys, num)?,
            handles(vals, num, "vals")?,
            priority,
            ignore_sparse,
        )
    })
}
extern "C" fn MXKVStorePullWithSparseEx(
    handle: KVStoreHandle,
    num: u32,
    keys: *mut *const c_char,
    vals: *mut NDArrayHandle,
    priority: c_int,
    ignore_sparse: bool,
) -> c_int {
    hosted_export!(|h| {
        store(handle)?.pull(
            h,
            str_keys(keys, num)?,
            handles(vals, num, "vals")?,
            priority,
            ignore_sparse,
        )
    })
}

extern "C" fn MXKVStorePushPull(
    handle: KVStoreHandle,
    vnum: mx_uint,
    vkeys: *const c_int,
    onum: mx_uint,
    okeys: *const c_int,
    vals: *mut NDArrayHandle,
    outs: *mut NDArrayHandle,
    priority: c_int,
) -> c_int {
    hosted_export!(|h| {
        let (vkeys, vals) = (int_keys(vkeys, vnum)?, handles(vals, vnum, "vals")?);
        let (okeys, outs) = (int_keys(okeys, onum)?, handles(outs, onum, "outs")?);
        store(handle)?.push_pull(h, vkeys, vals, okeys, outs, priority)
    })
}
extern "C" fn MXKVStorePushPullEx(
    handle: KVStoreHandle,
    vnum: mx_uint,
    vkeys: *mut *const c_char,
    onum: mx_uint,
    okeys: *mut *const c_char,
    vals: *mut NDArrayHandle,
    outs: *mut NDArrayHandle,
    priority: c_int,
) -> c_int {
    hosted_export!(|h| {
        let (vkeys, vals) = (str_keys(vkeys, vnum)?, handles(vals, vnum, "vals")?);
        let (okeys, outs) = (str_keys(okeys, onum)?, handles(outs, onum, "outs")?);
        store(handle)?.push_pull(h, vkeys, vals, okeys, outs, priority)
    })
}
extern "C" fn MXKVStoreBroadcast(
    handle: KVStoreHandle,
    vnum: mx_uint,
    vkeys: *const c_int,
    onum: mx_uint,
    okeys: *const c_int,
    vals: *mut NDArrayHandle,
    outs: *mut NDArrayHandle,
    priority: c_int,
) -> c_int {
    hosted_export!(|h| {
        let (vkeys, vals) = (int_keys(vkeys, vnum)?, handles(vals, vnum, "vals")?);
        let (okeys, outs) = (int_keys(okeys, onum)?, handles(outs, onum, "outs")?);
        store(handle)?.broadcast(h, vkeys, vals, okeys, outs, priority)
    })
}
extern "C" fn MXKVStoreBroadcastEx(
    handle: KVStoreHandle,
    vnum: mx_uint,
    vkeys: *mut *const c_char,
    onum: mx_uint,
    okeys: *mut *const c_char,
    vals: *mut NDArrayHandle,
    outs: *mut NDArrayHandle,
    priority: c_int,
) -> c_int {
    hosted_export!(|h| {
        let (vkeys, vals) = (str_keys(vkeys, vnum)?, handles(vals, vnum, "vals")?);
        let (okeys, outs) = (str_keys(okeys, onum)?, handles(outs, onum, "outs")?);
        store(handle)?.broadcast(h, vkeys, vals, okeys, outs, priority)
    })
}

extern "C" fn MXKVStoreSetUpdater(
    handle: KVStoreHandle,
    updater: MXKVStoreUpdater,
    updater_handle: *mut c_void,
) -> c_int {
    hosted_export!(|_| {
        store(handle)?.set_int_updater(updater, updater_handle)
    })
}
extern "C" fn MXKVStoreSetUpdaterEx(
    handle: KVStoreHandle,
    updater: MXKVStoreUpdater,
    str_updater: MXKVStoreStrUpdater,
    updater_handle: *mut c_void,
) -> c_int {
    hosted_export!(|_| {
        store(handle)?.set_updaters(updater, str_updater, updater_handle)
    })
}

extern "C" fn MXKVStoreGetType(handle: KVStoreHandle, r#type: *mut *const c_char) -> c_int {
    hosted_export!(|_| {
        let s = store(handle)?;
        crate::ensure!(!r#type.is_null(), "type is NULL");
        // SAFETY: checked non-NULL; the string lives as long as the store.
        unsafe { *r#type = s.type_name().as_ptr() };
        Ok(())
    })
}

fn write_int(handle: KVStoreHandle, out: *mut c_int, value: c_int) -> Result<()> {
    store(handle)?;
    crate::ensure!(!out.is_null(), "ret is NULL");
    // SAFETY: checked non-NULL.
    unsafe { *out = value };
    Ok(())
}
extern "C" fn MXKVStoreGetRank(handle: KVStoreHandle, ret: *mut c_int) -> c_int {
    hosted_export!(|_| {
        let rank = store(handle)?.native().rank();
        write_int(handle, ret, rank)
    })
}
extern "C" fn MXKVStoreGetGroupSize(handle: KVStoreHandle, ret: *mut c_int) -> c_int {
    hosted_export!(|_| {
        let size = store(handle)?.native().group_size();
        write_int(handle, ret, size)
    })
}
extern "C" fn MXKVStoreGetNumDeadNode(
    handle: KVStoreHandle,
    node_id: c_int,
    number: *mut c_int,
    timeout_sec: c_int,
) -> c_int {
    hosted_export!(|_| write_int(handle, number, store(handle)?.native().num_dead_nodes(node_id, timeout_sec)?))
}
extern "C" fn MXKVStoreBarrier(handle: KVStoreHandle) -> c_int {
    hosted_export!(|_| store(handle)?.native().barrier())
}
extern "C" fn MXKVStoreSetBarrierBeforeExit(
    handle: KVStoreHandle,
    barrier_before_exit: c_int,
) -> c_int {
    hosted_export!(|_| {
        store(handle)?.native().set_barrier_before_exit(barrier_before_exit != 0);
        Ok(())
    })
}

/// A distributed store's server serves until worker 0 stops it; non-distributed stores have
/// no servers: nothing to run (as MXNet's local stores).
extern "C" fn MXKVStoreRunServer(
    handle: KVStoreHandle,
    controller: crate::ffi::MXKVStoreServerController,
    controller_handle: *mut c_void,
) -> c_int {
    hosted_export!(|_| store(handle)?.native().run_server(crate::ffi::updater::controller(controller, controller_handle)))
}

/// Sends a command to a distributed store's servers; non-distributed stores have no
/// servers: no command to send (as MXNet's local stores).
extern "C" fn MXKVStoreSendCommmandToServers(
    handle: KVStoreHandle,
    cmd_id: c_int,
    cmd_body: *const c_char,
) -> c_int {
    hosted_export!(|_| {
        let s = store(handle)?;
        crate::ensure!(!cmd_body.is_null(), "cmd_body is NULL");
        // SAFETY: a NUL-terminated string (checked non-NULL).
        s.native().send_command(cmd_id, unsafe { CStr::from_ptr(cmd_body) }.to_bytes())
    })
}

extern "C" fn MXKVStorePullRowSparse(
    handle: KVStoreHandle,
    num: u32,
    keys: *const c_int,
    vals: *mut NDArrayHandle,
    row_ids: *const NDArrayHandle,
    priority: c_int,
) -> c_int {
    hosted_export!(|h| {
        store(handle)?.pull_row_sparse(
            h,
            int_keys(keys, num)?,
            handles(vals, num, "vals")?,
            handles(row_ids as *mut NDArrayHandle, num, "row_ids")?,
            priority,
        )
    })
}
extern "C" fn MXKVStorePullRowSparseEx(
    handle: KVStoreHandle,
    num: u32,
    keys: *const *const c_char,
    vals: *mut NDArrayHandle,
    row_ids: *const NDArrayHandle,
    priority: c_int,
) -> c_int {
    hosted_export!(|h| {
        store(handle)?.pull_row_sparse(
            h,
            str_keys(keys, num)?,
            handles(vals, num, "vals")?,
            handles(row_ids as *mut NDArrayHandle, num, "row_ids")?,
            priority,
        )
    })
}

/// Gradient compression, parsed as libkvstore's own store parses it: `device` stores apply
/// it to every later push, `local` stores accept and ignore it, dist stores pass it to the
/// MPI store underneath (worker 0 sends it to the servers).
extern "C" fn MXKVStoreSetGradientCompression(
    handle: KVStoreHandle,
    num_params: u32,
    keys: *mut *const c_char,
    vals: *mut *const c_char,
) -> c_int {
    hosted_export!(|_| {
        let store = store(handle)?;
        let keys = strings(keys, num_params, "keys")?;
        let vals = strings(vals, num_params, "vals")?;
        store.set_gradient_compression(&keys.into_iter().zip(vals).collect::<Vec<_>>())
    })
}

/// A KVStore name without a hosted function (none of MXNet 1.9's: each is listed in `target`):
/// a clear -1 rather than native code run on the host's handles.
extern "C" fn not_hosted_yet() -> c_int {
    call(|| "MXKVStore", |_| {
        crate::bail!("this KVStore call is not supported by the hosted store yet")
    })
}

/// Drains the host's work, the store's sums included, then shuts the host down.
extern "C" fn MXNotifyShutdown() -> c_int {
    let Some(host) = super::host() else { return -1 };
    // SAFETY: the host's MXNDArrayWaitAll and MXNotifyShutdown take no arguments.
    unsafe {
        (host.api.wait_all)();
        super::SHUT_DOWN.store(true, std::sync::atomic::Ordering::Release);
        (host.api.notify_shutdown)()
    }
}

/// The hosted target of the trampoline `name`, for the `MXKVStore*` names and MXNotifyShutdown.
pub(super) fn target(name: &str) -> Option<*mut ()> {
    macro_rules! by_name {
        ($($f:ident),* $(,)?) => {
            match name {
                $(stringify!($f) => $f as *mut (),)*
                _ => not_hosted_yet as *mut (),
            }
        };
    }
    let f: *mut () = by_name!(
        MXKVStoreCreate,
        MXKVStoreFree,
        MXKVStoreInit,
        MXKVStoreInitEx,
        MXKVStorePush,
        MXKVStorePushEx,
        MXKVStorePull,
        MXKVStorePullEx,
        MXKVStorePullWithSparse,
        MXKVStorePullWithSparseEx,
        MXKVStorePullRowSparse,
        MXKVStorePullRowSparseEx,
        MXKVStorePushPull,
        MXKVStorePushPullEx,
        MXKVStoreBroadcast,
        MXKVStoreBroadcastEx,
        MXKVStoreSetUpdater,
        MXKVStoreSetUpdaterEx,
        MXKVStoreGetType,
        MXKVStoreGetRank,
        MXKVStoreGetGroupSize,
        MXKVStoreGetNumDeadNode,
        MXKVStoreBarrier,
        MXKVStoreSetBarrierBeforeExit,
        MXKVStoreRunServer,
        MXKVStoreSendCommmandToServers,
        MXKVStoreSetGradientCompression,
        MXNotifyShutdown,
    );
    Some(f)
}
