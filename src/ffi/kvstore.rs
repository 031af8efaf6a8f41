//! MXNet 1.9's 31 KVStore C functions.
//!
//! Conventions of every function here: returns 0 on success and -1 on failure, with the cause
//! in `MXGetLastError()`; on failure nothing changes and no out-parameter is written. Arrays
//! may be NULL only when their count is 0. Handles are checked: an unknown, freed or
//! wrong-kind handle is an error, never undefined behaviour.

#![allow(non_snake_case)]

use super::args::{self, Out};
use super::served;
use super::kvstore_calls::{self as calls, TwoLists};
use super::runtime;
use super::types::*;
use super::updater;
use crate::store::Keys;
use std::os::raw::{c_char, c_int, c_void};

/// Creates a store.
///
/// Parameters: `type` is MXNet's store type, matched lower-cased: any name containing `device`
/// reduces as MXNet's `device` store; other non-distributed names (`local`, unknown names)
/// make a `local` store. Names containing `nccl` (and not `dist`) make an `nccl` store: dense
/// arrays only, several values of a key on distinct GPUs, one set of GPUs (docs/gpu.md); it
/// needs a usable CUDA device and is refused (-1) without one. Names containing `dist` join
/// the MPI job (started by `mpirun`) in the role `DMLC_ROLE` names; `_async` in the name makes
/// servers apply each push at once.
/// Returns: 0, and the new handle in `*out`.
/// Ownership: the caller frees the store with `MXKVStoreFree`.
pub extern "C" fn MXKVStoreCreate(r#type: *const c_char, out: *mut KVStoreHandle) -> c_int {
    ffi_boundary!({
        let name = args::string(r#type, "type")?;
        let out = Out::new(out, "out")?;
        out.write(served::create(name)?);
        Ok(())
    })
}

/// Frees a store; arrays it handed out stay valid.
///
/// Ownership: `handle` is invalid afterwards; pending operations finish first.
pub extern "C" fn MXKVStoreFree(handle: KVStoreHandle) -> c_int {
    ffi_boundary!({ super::handle::free_kvstore(handle) })
}

/// Sets gradient compression: `type` = `2bit` (MXNet 1.9) or `1bit` (MXNet 2.0), and a
/// `threshold` above 0 (default 0.5). `device` stores apply it to every later push; `local`
/// stores accept and ignore it, as MXNet does; `nccl` stores refuse it (-1).
///
/// Parameters: `num_params` key/value string pairs. Returns: 0, or -1 for a missing or unknown
/// type, a threshold ≤ 0 or an unknown key. Ownership: the strings are copied.
pub extern "C" fn MXKVStoreSetGradientCompression(
    handle: KVStoreHandle,
    num_params: u32,
    keys: *mut *const c_char,
    vals: *mut *const c_char,
) -> c_int {
    ffi_boundary!({
        let store = calls::store(handle)?;
        let store = store.store();
        let keys = args::strings(keys, args::len(num_params), "keys")?;
        let vals = args::strings(vals, args::len(num_params), "vals")?;
        let params: Vec<(String, String)> = keys.iter().zip(vals).map(|(k, v)| (k.to_string(), v.to_string())).collect();
        store.set_gradient_compression(&params)
    })
}

/// Initialises int keys with deep copies of `vals`.
///
/// Parameters: `num` keys and values. Returns: -1 if a key exists already (the store is then
/// unchanged). Ownership: the caller keeps `vals`.
pub extern "C" fn MXKVStoreInit(handle: KVStoreHandle, num: u32, keys: *const c_int, vals: *mut NDArrayHandle) -> c_int {
    ffi_boundary!({ calls::init(handle, Keys::Int(calls::int_keys(keys, num, "keys")?), vals) })
}

/// Initialises string keys with deep copies of `vals`; see `MXKVStoreInit`.
///
/// Ownership: the caller keeps `keys` and `vals`.
pub extern "C" fn MXKVStoreInitEx(handle: KVStoreHandle, num: u32, keys: *mut *const c_char, vals: *mut NDArrayHandle) -> c_int {
    ffi_boundary!({ calls::init(handle, Keys::Str(&calls::str_keys(keys, num, "keys")?), vals) })
}

/// Pushes values to int keys: the values of each key are summed, then the updater runs (or the
/// sum is stored). Returns once scheduled.
///
/// Returns: -1 for an uninitialised key, or a value whose shape or dtype differs from the
/// stored one (nothing is pushed then). Ownership: the caller keeps `vals`; the store copies.
pub extern "C" fn MXKVStorePush(handle: KVStoreHandle, num: u32, keys: *const c_int, vals: *mut NDArrayHandle, priority: c_int) -> c_int {
    ffi_boundary!({ calls::push(handle, Keys::Int(calls::int_keys(keys, num, "keys")?), vals, priority) })
}

/// Pushes values to string keys; see `MXKVStorePush`.
///
/// Ownership: the caller keeps `keys` and `vals`.
pub extern "C" fn MXKVStorePushEx(
    handle: KVStoreHandle,
    num: u32,
    keys: *mut *const c_char,
    vals: *mut NDArrayHandle,
    priority: c_int,
) -> c_int {
    ffi_boundary!({ calls::push(handle, Keys::Str(&calls::str_keys(keys, num, "keys")?), vals, priority) })
}

/// Pulls int keys into `vals`; sparse outputs are skipped unless `ignore_sparse` is false.
///
/// Ownership: the caller keeps `vals`, which the store writes.
pub extern "C" fn MXKVStorePullWithSparse(
    handle: KVStoreHandle,
    num: u32,
    keys: *const c_int,
    vals: *mut NDArrayHandle,
    priority: c_int,
    ignore_sparse: bool,
) -> c_int {
    ffi_boundary!({
        calls::pull(handle, Keys::Int(calls::int_keys(keys, num, "keys")?), vals, priority, ignore_sparse)
    })
}

/// Pulls string keys; see `MXKVStorePullWithSparse`.
///
/// Ownership: the caller keeps `keys` and `vals`.
pub extern "C" fn MXKVStorePullWithSparseEx(
    handle: KVStoreHandle,
    num: u32,
    keys: *mut *const c_char,
    vals: *mut NDArrayHandle,
    priority: c_int,
    ignore_sparse: bool,
) -> c_int {
    ffi_boundary!({
        calls::pull(handle, Keys::Str(&calls::str_keys(keys, num, "keys")?), vals, priority, ignore_sparse)
    })
}

/// Pulls int keys into dense outputs; sparse outputs are skipped (as MXNet does).
///
/// Ownership: the caller keeps `vals`, which the store writes.
pub extern "C" fn MXKVStorePull(handle: KVStoreHandle, num: u32, keys: *const c_int, vals: *mut NDArrayHandle, priority: c_int) -> c_int {
    ffi_boundary!({ calls::pull(handle, Keys::Int(calls::int_keys(keys, num, "keys")?), vals, priority, true) })
}

/// Pulls string keys into dense outputs; see `MXKVStorePull`.
///
/// Ownership: the caller keeps `keys` and `vals`.
pub extern "C" fn MXKVStorePullEx(
    handle: KVStoreHandle,
    num: u32,
    keys: *mut *const c_char,
    vals: *mut NDArrayHandle,
    priority: c_int,
) -> c_int {
    ffi_boundary!({
        calls::pull(handle, Keys::Str(&calls::str_keys(keys, num, "keys")?), vals, priority, true)
    })
}

/// Pulls the rows `row_ids[i]` of int keys into row_sparse `vals[i]`: the output's rows are
/// the sorted unique ids (any dtype and shape), zero where the stored value has no such row
/// (and none at all from a stored value without rows, as in MXNet).
/// Returns: -1 for a dense output, dense stored value or sparse row ids.
///
/// Ownership: the caller keeps `vals` and `row_ids`.
pub extern "C" fn MXKVStorePullRowSparse(
    handle: KVStoreHandle,
    num: u32,
    keys: *const c_int,
    vals: *mut NDArrayHandle,
    row_ids: *const NDArrayHandle,
    priority: c_int,
) -> c_int {
    ffi_boundary!({
        calls::pull_row_sparse(handle, Keys::Int(calls::int_keys(keys, num, "keys")?), vals, row_ids, priority)
    })
}

/// Pulls rows of string keys; see `MXKVStorePullRowSparse`.
///
/// Ownership: the caller keeps `keys`, `vals` and `row_ids`.
pub extern "C" fn MXKVStorePullRowSparseEx(
    handle: KVStoreHandle,
    num: u32,
    keys: *mut *const c_char,
    vals: *mut NDArrayHandle,
    row_ids: *const NDArrayHandle,
    priority: c_int,
) -> c_int {
    ffi_boundary!({
        calls::pull_row_sparse(handle, Keys::Str(&calls::str_keys(keys, num, "keys")?), vals, row_ids, priority)
    })
}

/// Initialises `vkeys` with `vals`, then pulls `okeys` into `outs`.
///
/// Ownership: the caller keeps every array.
pub extern "C" fn MXKVStoreBroadcast(
    handle: KVStoreHandle,
    vnum: mx_uint,
    vkeys: *const c_int,
    onum: mx_uint,
    okeys: *const c_int,
    vals: *mut NDArrayHandle,
    outs: *mut NDArrayHandle,
    priority: c_int,
) -> c_int {
    ffi_boundary!({
        let keys = (Keys::Int(calls::int_keys(vkeys, vnum, "vkeys")?), Keys::Int(calls::int_keys(okeys, onum, "okeys")?));
        calls::two_lists(TwoLists::Broadcast, handle, keys, vals, outs, priority)
    })
}

/// Broadcast with string keys; see `MXKVStoreBroadcast`.
///
/// Ownership: the caller keeps every array.
pub extern "C" fn MXKVStoreBroadcastEx(
    handle: KVStoreHandle,
    vnum: mx_uint,
    vkeys: *mut *const c_char,
    onum: mx_uint,
    okeys: *mut *const c_char,
    vals: *mut NDArrayHandle,
    outs: *mut NDArrayHandle,
    priority: c_int,
) -> c_int {
    ffi_boundary!({
        let (v, o) = (calls::str_keys(vkeys, vnum, "vkeys")?, calls::str_keys(okeys, onum, "okeys")?);
        calls::two_lists(TwoLists::Broadcast, handle, (Keys::Str(&v), Keys::Str(&o)), vals, outs, priority)
    })
}

/// Pushes `vals` to `vkeys`, then pulls `okeys` into `outs`; every push reads its inputs
/// before any pull writes, so `outs` may be `vals` (in-place allreduce).
///
/// Ownership: the caller keeps every array.
pub extern "C" fn MXKVStorePushPull(
    handle: KVStoreHandle,
    vnum: mx_uint,
    vkeys: *const c_int,
    onum: mx_uint,
    okeys: *const c_int,
    vals: *mut NDArrayHandle,
    outs: *mut NDArrayHandle,
    priority: c_int,
) -> c_int {
    ffi_boundary!({
        let keys = (Keys::Int(calls::int_keys(vkeys, vnum, "vkeys")?), Keys::Int(calls::int_keys(okeys, onum, "okeys")?));
        calls::two_lists(TwoLists::PushPull, handle, keys, vals, outs, priority)
    })
}

/// Push-pull with string keys; see `MXKVStorePushPull`.
///
/// Ownership: the caller keeps every array.
pub extern "C" fn MXKVStorePushPullEx(
    handle: KVStoreHandle,
    vnum: mx_uint,
    vkeys: *mut *const c_char,
    onum: mx_uint,
    okeys: *mut *const c_char,
    vals: *mut NDArrayHandle,
    outs: *mut NDArrayHandle,
    priority: c_int,
) -> c_int {
    ffi_boundary!({
        let (v, o) = (calls::str_keys(vkeys, vnum, "vkeys")?, calls::str_keys(okeys, onum, "okeys")?);
        calls::two_lists(TwoLists::PushPull, handle, (Keys::Str(&v), Keys::Str(&o)), vals, outs, priority)
    })
}

/// Installs the int updater, called as `updater(key, recv, local, updater_handle)` on the
/// pushing thread, once per key in ascending key order. A string-key store passes internal
/// ids 0, 1, ... (init order). NULL resets pushes to assignment.
///
/// Ownership: `recv` and `local` are new handles the updater must `MXNDArrayFree`; it changes
/// the store by writing `local` in place. `updater_handle` is passed back untouched.
pub extern "C" fn MXKVStoreSetUpdater(handle: KVStoreHandle, updater: MXKVStoreUpdater, updater_handle: *mut c_void) -> c_int {
    ffi_boundary!({
        let store = calls::store(handle)?;
        if let Some(updaters) = store.updaters(updater, None, updater_handle)? {
            store.store().set_int_updater(updaters.int);
        }
        Ok(())
    })
}

/// Installs the int updater and the string updater (used by string-key stores); see
/// `MXKVStoreSetUpdater`.
///
/// Ownership: as for `MXKVStoreSetUpdater`; the key string is valid during the call only.
pub extern "C" fn MXKVStoreSetUpdaterEx(
    handle: KVStoreHandle,
    updater: MXKVStoreUpdater,
    str_updater: MXKVStoreStrUpdater,
    updater_handle: *mut c_void,
) -> c_int {
    ffi_boundary!({
        let store = calls::store(handle)?;
        if let Some(updaters) = store.updaters(updater, str_updater, updater_handle)? {
            store.store().set_updaters(updaters);
        }
        Ok(())
    })
}

/// The store's type name, lower-cased.
///
/// Ownership: `*type` is borrowed from the store and valid until `MXKVStoreFree`.
pub extern "C" fn MXKVStoreGetType(handle: KVStoreHandle, r#type: *mut *const c_char) -> c_int {
    ffi_boundary!({
        let out = Out::new(r#type, "type")?;
        out.write(calls::store(handle)?.store().type_name().as_ptr());
        Ok(())
    })
}

/// This process's rank in its group (workers among workers, servers among servers): 0 for
/// non-distributed stores.
///
/// Ownership: `*ret` is written on success.
pub extern "C" fn MXKVStoreGetRank(handle: KVStoreHandle, ret: *mut c_int) -> c_int {
    ffi_boundary!({
        let out = Out::new(ret, "ret")?;
        out.write(calls::store(handle)?.store().rank());
        Ok(())
    })
}

/// The number of workers (on every role): 1 for non-distributed stores.
///
/// Ownership: `*ret` is written on success.
pub extern "C" fn MXKVStoreGetGroupSize(handle: KVStoreHandle, ret: *mut c_int) -> c_int {
    ffi_boundary!({
        let out = Out::new(ret, "ret")?;
        out.write(calls::store(handle)?.store().group_size());
        Ok(())
    })
}

/// 1 if this process is a worker (`DMLC_ROLE` unset or `worker`), else 0.
///
/// Ownership: `*ret` is written on success.
pub extern "C" fn MXKVStoreIsWorkerNode(ret: *mut c_int) -> c_int {
    ffi_boundary!({ runtime::role_is(ret, "worker") })
}

/// 1 if this process is a server (`DMLC_ROLE=server`), else 0.
///
/// Ownership: `*ret` is written on success.
pub extern "C" fn MXKVStoreIsServerNode(ret: *mut c_int) -> c_int {
    ffi_boundary!({ runtime::role_is(ret, "server") })
}

/// 1 if this process is the scheduler (`DMLC_ROLE=scheduler`), else 0.
///
/// Ownership: `*ret` is written on success.
pub extern "C" fn MXKVStoreIsSchedulerNode(ret: *mut c_int) -> c_int {
    ffi_boundary!({ runtime::role_is(ret, "scheduler") })
}

/// A barrier over all workers (it does not wait for pending pushes); returns at once for
/// non-distributed stores.
///
/// Ownership: none.
pub extern "C" fn MXKVStoreBarrier(handle: KVStoreHandle) -> c_int {
    ffi_boundary!({ calls::store(handle)?.store().barrier() })
}

/// Whether freeing a distributed store waits at a barrier first; recorded, no effect locally.
///
/// Ownership: none.
pub extern "C" fn MXKVStoreSetBarrierBeforeExit(handle: KVStoreHandle, barrier_before_exit: c_int) -> c_int {
    ffi_boundary!({
        calls::store(handle)?.store().set_barrier_before_exit(barrier_before_exit != 0);
        Ok(())
    })
}

/// Runs a parameter server until worker 0 stops it (on a scheduler: joins the start and exit
/// barriers); the controller receives command 0 on this thread. Returns at once for
/// non-distributed stores (the controller is never called); -1 on a worker.
///
/// Ownership: `controller_handle` is passed back untouched.
pub extern "C" fn MXKVStoreRunServer(
    handle: KVStoreHandle,
    controller: MXKVStoreServerController,
    controller_handle: *mut c_void,
) -> c_int {
    ffi_boundary!({
        let store = calls::store(handle)?;
        store.store().run_server(updater::controller(controller, controller_handle))
    })
}

/// Sends a command to every server and returns after each has handled it (0 runs the
/// servers' controllers); nothing to do for non-distributed stores. (The triple `m`
/// is MXNet's spelling, kept for ABI compatibility.)
///
/// Ownership: `cmd_body` is read during the call only.
pub extern "C" fn MXKVStoreSendCommmandToServers(handle: KVStoreHandle, cmd_id: c_int, cmd_body: *const c_char) -> c_int {
    ffi_boundary!({
        let store = calls::store(handle)?;
        let body = args::string(cmd_body, "cmd_body")?;
        store.store().send_command(cmd_id, body.as_bytes())
    })
}

/// The number of dead nodes in the groups of `node_id`: always 0 (in a distributed job a dead
/// process makes MPI abort the whole job).
///
/// Ownership: `*number` is written on success.
pub extern "C" fn MXKVStoreGetNumDeadNode(handle: KVStoreHandle, node_id: c_int, number: *mut c_int, timeout_sec: c_int) -> c_int {
    ffi_boundary!({
        let out = Out::new(number, "number")?;
        out.write(calls::store(handle)?.store().num_dead_nodes(node_id, timeout_sec)?);
        Ok(())
    })
}

/// Sets the parameter-server environment (`DMLC_*` values) for distributed stores.
///
/// Ownership: the strings are copied.
pub extern "C" fn MXInitPSEnv(num_vars: u32, keys: *mut *const c_char, vals: *mut *const c_char) -> c_int {
    ffi_boundary!({
        let keys = args::strings(keys, args::len(num_vars), "keys")?;
        let vals = args::strings(vals, args::len(num_vars), "vals")?;
        crate::store::env::set(&keys, &vals);
        Ok(())
    })
}
