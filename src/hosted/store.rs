//! The hosted store: libkvstore's one store (`KVStore`, every type: local, device and the
//! dist stores) serving the host's arrays. The store holds, checks, sums and updates; this
//! module only carries the host's arrays across:
//!
//! - a plain dense CPU array the store has seen before is lent to it in place (`super::lent`):
//!   the store's ops read and write the host array's own memory, on its own dependency;
//! - any other dense value or output crosses through a staging array, one per key and position,
//!   that is a native array and a host array at once (`HostArray::over_native`): the host's
//!   `_copyto` fills it (or empties it into the output), and the host's engine, which runs
//!   the store's ops too (`super::engine`), orders the copies with them on one dependency of
//!   the host's (the staging array's token), so a call returns at once, as MXNet's does;
//! - a row_sparse array crosses by its parts (`sparse`), waiting on the calling thread;
//! - an updater gets host arrays over the store's sum and stored value that are those arrays'
//!   dependencies in the host's engine ([`Views`]), so its host ops are ordered after the sum
//!   and before the store's next use of the value with no op of the store's in between.
//!
//! Every call reaches the store in one piece, which checks all of it before queuing anything
//! (the staging arrays are the only thing a refused call has touched).

use super::dlpack::HostArray;
use super::engine::named;
use super::host::{describe, Described, Host, DENSE, ROW_SPARSE};
use super::lent::{handle_of, Lender, Lending, OVER_MEMORY};
use super::server_views::ServerViews;
use super::key::{drop_source_for_test, sum_failure_for_test, with_native_keys, Key};
use super::sparse::{self, dims};
use crate::engine::engine;
use crate::ffi::{MXKVStoreStrUpdater, MXKVStoreUpdater, NDArrayHandle};
use crate::store::dist::Role;
use crate::ffi::served::ServedStore;
use crate::store::{IntUpdater, KVStore, Keys, Updaters};
use crate::{Context, DType, NDArray, Result};
use parking_lot::{Mutex, ReentrantMutex};
use std::collections::HashMap;
use std::ffi::CStr;
use std::os::raw::{c_char, c_int, c_void};
use std::sync::Arc;

/// A staging array: `native` and `host` are the same memory, and one dependency in the host's
/// engine, which runs the store's ops on `native` (its token is a shallow copy of `host`,
/// `Engine::bind_host_token`): the host orders its copies and the store's ops directly.
struct Staging {
    native: NDArray,
    host: HostArray,
    dtype: DType,
    shape: Vec<i64>,
}

impl Staging {
    fn new(host: &Host, d: &Described) -> Result<Staging> {
        let native = NDArray::zeros(&dims(&d.shape), Context::cpu(0), d.dtype)?;
        let view = HostArray::over_native(host, &native)?;
        let token = host.shallow_copy(view.handle)?;
        // A new array has no token yet; only a stopped host engine refuses.
        if !engine().bind_host_token(native.var(), token as usize | OVER_MEMORY) {
            host.release(token);
            view.forget(host);
            crate::bail!("the host's engine has shut down: no store call can run");
        }
        Ok(Staging { native, host: view, dtype: d.dtype, shape: d.shape.clone() })
    }

    /// Lets the host array go (without waiting: queued ops hold their own references). The
    /// token goes first: it holds the host array, which holds the native array, which holds
    /// the token.
    fn forget(self, host: &Host) {
        engine().release_host_token(self.native.var());
        self.host.forget(host);
    }
}

/// Which staging array: the `nth` value (or output) of `key` in a call.
#[derive(Clone, PartialEq, Eq, Hash)]
struct Slot {
    key: Key,
    nth: usize,
    output: bool,
}

/// A call's host arrays, crossed over: the native arrays to hand the store, and the host
/// copies that fill or empty the staging arrays.
#[derive(Default)]
struct Crossed {
    keys: Vec<Key>,
    natives: Vec<NDArray>,
    copies: Vec<(NDArrayHandle, NDArrayHandle)>,
    /// row_sparse outputs, filled from their native arrays once the store is done.
    sparse_outs: Vec<(NDArray, NDArrayHandle, Described)>,
}

pub(super) struct HostedStore {
    native: KVStore,
    is_dist: bool,
    /// Held through a call: two calls must not fill one staging array at once. Reentrant: an
    /// updater (called inside a push) may call the store again.
    calls: ReentrantMutex<()>,
    staging: Mutex<HashMap<Slot, Staging>>,
    /// The host arrays seen, lent in place from their third call on (`super::lent`).
    lender: Lender,
    /// The host arrays updaters get, over the store's sums and stored values.
    views: Arc<Views>,
    /// The same on a dist server (`server_views`).
    server_views: Arc<ServerViews>,
}

/// Host arrays over the store's arrays that updaters get, kept across calls: making one is a
/// host call, and the store hands every update of a key the same sum buffer and stored value.
/// Each is bound to its native array's dependency (the native array's token is a shallow copy
/// of it), so the updater's host ops on it are ordered with the store's ops directly, with no
/// turn. Each holds its native array, so the memory (the key here) is not reused while kept.
#[derive(Default)]
struct Views(Mutex<HashMap<ViewKey, (HostArray, NDArray)>>);

/// A kept view's native array: its data pointer, byte length, dtype and shape.
type ViewKey = (usize, usize, DType, Vec<usize>);

impl Views {
    /// More than this many kept (arrays the store has since replaced), all are let go.
    const MOST: usize = 4096;

    fn over(&self, host: &Host, array: &NDArray) -> Result<NDArrayHandle> {
        // Memory a host array already stands for (a single pushed value handed on as the sum:
        // the host's own array, lent, which is what MXNet's updater gets too; or its staging
        // array): that host array, whose dependency is the store's.
        if let Some(token) = engine().host_token(array.var())?.filter(|t| t & OVER_MEMORY != 0) {
            return Ok(handle_of(token));
        }
        let key = (array.data_ptr() as usize, array.data_byte_len(), array.dtype(), array.shape().to_vec());
        let mut views = self.0.lock();
        if let Some((v, _)) = views.get(&key) {
            return Ok(v.handle);
        }
        if views.len() >= Self::MOST {
            views.drain().for_each(|(_, (v, native))| unbind(host, v, &native, false));
        }
        let view = HostArray::over_native(host, array)?;
        // The store's ops queued so far are on the array's old token: they finish before the
        // view becomes its dependency (once per array, at its first update).
        let bound = engine()
            .host_token(array.var())?
            .map_or(Ok(()), |old| host.wait_to_write(handle_of(old)))
            .and_then(|()| host.shallow_copy(view.handle));
        let token = match bound {
            Ok(token) => token,
            Err(e) => {
                view.forget(host);
                return Err(e);
            }
        };
        engine().release_host_token(array.var());
        if !engine().bind_host_token(array.var(), token as usize | OVER_MEMORY) {
            host.forget(token);
            view.forget(host);
            crate::bail!("the host's engine has shut down: no store call can run");
        }
        let handle = view.handle;
        views.insert(key, (view, array.clone()));
        Ok(handle)
    }

    /// Lets every view go, waiting for their host ops (the store is going).
    fn free_all(&self, host: &Host) {
        for (_, (v, native)) in std::mem::take(&mut *self.0.lock()) {
            unbind(host, v, &native, true);
        }
    }
}

/// Lets a view go: the store's later ops on its native array get a new token, after the
/// view's ops (the view is the array's dependency until then). The token goes first: it holds
/// the view, which holds the native array, which holds the token.
fn unbind(host: &Host, view: HostArray, native: &NDArray, free: bool) {
    if !super::shut_down() {
        let _ = host.wait_to_write(view.handle);
    }
    engine().release_host_token(native.var());
    if free {
        view.free(host);
    } else {
        view.forget(host);
    }
}

/// The arrays hosted mode carries across: dense and row_sparse ones.
fn crossable(key: &Key, d: &Described, what: &str) -> Result<()> {
    crate::ensure!(
        d.stype == DENSE || d.stype == ROW_SPARSE,
        "key {key}: the hosted store carries dense and row_sparse arrays; the {what} has storage type {}",
        d.stype
    );
    Ok(())
}

impl HostedStore {
    /// A store for `MXKVStoreCreate` (`crate::ffi::served::serve_with`).
    pub fn create(name: &str) -> Result<Arc<dyn ServedStore>> {
        Ok(Arc::new(HostedStore::new(name)?))
    }

    fn new(name: &str) -> Result<HostedStore> {
        let lower = name.to_ascii_lowercase();
        crate::ensure!(
            !lower.contains("nccl") && !lower.contains("horovod") && !lower.contains("byteps"),
            "store type {name}: hosted mode serves `local`, `device` and the `dist` stores; GPU stores are later work"
        );
        let native = KVStore::new(&lower)?;
        // The updaters' host ops are ordered by the views' dependencies (`Views::over`).
        native.set_updaters_wait(false);
        Ok(HostedStore {
            is_dist: crate::store::dist::dist_mode(&lower).is_some(),
            native,
            calls: ReentrantMutex::new(()),
            staging: Mutex::new(HashMap::new()),
            lender: Lender::default(),
            views: Arc::default(),
            server_views: Arc::default(),
        })
    }

    /// The staging array of `slot` for an array described by `d` (a new one where the last
    /// call's had another shape or dtype).
    fn staging<'a>(&self, cache: &'a mut HashMap<Slot, Staging>, host: &Host, slot: Slot, d: &Described) -> Result<&'a Staging> {
        let fits = cache.get(&slot).is_some_and(|s| s.dtype == d.dtype && s.shape == d.shape);
        if !fits {
            let made = Staging::new(host, d)?;
            if let Some(old) = cache.insert(slot.clone(), made) {
                old.forget(host);
            }
        }
        cache.get(&slot).ok_or_else(|| crate::Error::new("staging array missing (internal error)"))
    }

    /// Crosses a call's values (or, with `outputs`, its outputs) over: dense ones through
    /// staging arrays (the copies into them, or out of them after the store's pull), unless
    /// lent; row_sparse values by their parts, now; row_sparse outputs get native arrays of
    /// their own, read back once the store is done.
    fn cross(&self, host: &Host, keys: &[Key], arrays: &[NDArrayHandle], outputs: bool, lending: &mut Lending<'_>, crossed: &mut Crossed) -> Result<()> {
        let mut cache = self.staging.lock();
        let mut seen: HashMap<&Key, usize> = HashMap::new();
        // A key's dense outputs of one shape and dtype share a staging array: the store pulls
        // into it once (its checks of one are its checks of all) and the host copies it out
        // to each.
        let mut pulled: HashMap<(&Key, DType, Vec<i64>), NDArrayHandle> = HashMap::new();
        for (k, a) in keys.iter().zip(arrays) {
            let d = describe(host, *a)?;
            crossable(k, &d, if outputs { "output" } else { "pushed value" })?;
            if let Some(native) = lending.lend(host, *a, &d)? {
                crossed.natives.push(native);
                crossed.keys.push(k.clone());
                continue;
            }
            if outputs && d.stype != ROW_SPARSE {
                if let Some(staging) = pulled.get(&(k, d.dtype, d.shape.clone())) {
                    crossed.copies.push((*staging, *a));
                    continue;
                }
            }
            let nth = seen.entry(k).or_insert(0);
            if d.stype == ROW_SPARSE && outputs {
                let native = NDArray::empty_row_sparse(&dims(&d.shape), Context::cpu(0), d.dtype)?;
                crossed.natives.push(native.clone());
                crossed.sparse_outs.push((native, *a, d));
            } else if d.stype == ROW_SPARSE {
                crossed.natives.push(sparse::to_native(host, *a, &d)?);
            } else {
                let s = self.staging(&mut cache, host, Slot { key: k.clone(), nth: *nth, output: outputs }, &d)?;
                crossed.natives.push(s.native.clone());
                crossed.copies.push(if outputs { (s.host.handle, *a) } else { (*a, s.host.handle) });
                if outputs {
                    pulled.insert((k, d.dtype, d.shape.clone()), s.host.handle);
                }
            }
            *nth += 1;
            crossed.keys.push(k.clone());
        }
        Ok(())
    }

    /// Fills the staging arrays of a push (the host's copies).
    fn fill(&self, host: &Host, crossed: &Crossed, priority: c_int) -> Result<()> {
        copies(host, crossed)?;
        if let Some(fail) = sum_failure_for_test() {
            // The test control fails the store's work on these values, as a failing sum would.
            let vars: Vec<_> = crossed.natives.iter().map(|n| n.var()).collect();
            engine().push(&[], &vars, priority, move |_| fail());
        }
        Ok(())
    }

    /// Empties the staging arrays of a pull into the outputs (the host's copies, after the
    /// store's pull), and fills the row_sparse outputs (waiting for the pull).
    fn empty(&self, host: &Host, crossed: &Crossed) -> Result<()> {
        copies(host, crossed)?;
        for (native, out, d) in &crossed.sparse_outs {
            sparse::from_native(host, native, *out, d)?;
        }
        Ok(())
    }

    fn init(&self, host: &Host, keys: Vec<Key>, values: &[NDArrayHandle]) -> Result<()> {
        let _call = self.calls.lock();
        let natives = self.cross_init(host, &keys, values)?;
        with_native_keys(&keys, |ks| self.native.init(ks, &natives))
    }

    /// Crosses an init's values over, now: new native arrays the store takes.
    fn cross_init(&self, host: &Host, keys: &[Key], values: &[NDArrayHandle]) -> Result<Vec<NDArray>> {
        let mut natives = Vec::with_capacity(values.len());
        for (k, v) in keys.iter().zip(values) {
            let d = describe(host, *v)?;
            crossable(k, &d, "value")?;
            if d.stype == ROW_SPARSE {
                natives.push(sparse::to_native(host, *v, &d)?);
                continue;
            }
            let native = NDArray::zeros(&dims(&d.shape), Context::cpu(0), d.dtype)?;
            let view = HostArray::over_native(host, &native)?;
            let copied = host.copy(*v, view.handle).and_then(|()| host.wait_to_write(view.handle));
            view.free(host);
            copied?;
            natives.push(native);
        }
        Ok(natives)
    }

    fn push(&self, host: &Host, keys: Vec<Key>, values: &[NDArrayHandle], priority: c_int) -> Result<()> {
        let _call = self.calls.lock();
        let mut crossed = Crossed::default();
        self.cross(host, &keys, values, false, &mut Lending::new(host, &self.lender), &mut crossed)?;
        self.fill(host, &crossed, priority)?;
        drop_last_sources_for_test(&mut crossed);
        with_native_keys(&crossed.keys, |ks| self.native.push(ks, std::mem::take(&mut crossed.natives), priority))
    }

    fn pull(&self, host: &Host, keys: Vec<Key>, outs: &[NDArrayHandle], priority: c_int, ignore_sparse: bool) -> Result<()> {
        let _call = self.calls.lock();
        let mut crossed = Crossed::default();
        self.cross(host, &keys, outs, true, &mut Lending::new(host, &self.lender), &mut crossed)?;
        if ignore_sparse {
            // The store skips them: they keep what they hold.
            crossed.sparse_outs.clear();
        }
        with_native_keys(&crossed.keys, |ks| self.native.pull(ks, std::mem::take(&mut crossed.natives), priority, ignore_sparse))?;
        self.empty(host, &crossed)
    }

    /// `PushPull`: one call of the store (it checks the push and the pull before either runs).
    fn push_pull(&self, host: &Host, vkeys: Vec<Key>, values: &[NDArrayHandle], okeys: Vec<Key>, outs: &[NDArrayHandle], priority: c_int) -> Result<()> {
        let _call = self.calls.lock();
        let mut lending = Lending::new(host, &self.lender);
        let mut pushed = Crossed::default();
        self.cross(host, &vkeys, values, false, &mut lending, &mut pushed)?;
        let mut pulled = Crossed::default();
        self.cross(host, &okeys, outs, true, &mut lending, &mut pulled)?;
        // The store's push-pull skips row_sparse outputs, as its pull with ignore_sparse.
        pulled.sparse_outs.clear();
        self.fill(host, &pushed, priority)?;
        drop_last_sources_for_test(&mut pushed);
        let natives = std::mem::take(&mut pushed.natives);
        with_native_keys(&pushed.keys, |vks| {
            with_native_keys(&pulled.keys, |oks| self.native.push_pull(vks, natives, oks, std::mem::take(&mut pulled.natives), priority))
        })?;
        self.empty(host, &pulled)
    }

    /// `Broadcast`: one call of the store (init, then pull).
    fn broadcast(&self, host: &Host, vkeys: Vec<Key>, values: &[NDArrayHandle], okeys: Vec<Key>, outs: &[NDArrayHandle], priority: c_int) -> Result<()> {
        let _call = self.calls.lock();
        let natives = self.cross_init(host, &vkeys, values)?;
        let mut pulled = Crossed::default();
        self.cross(host, &okeys, outs, true, &mut Lending::new(host, &self.lender), &mut pulled)?;
        pulled.sparse_outs.clear();
        with_native_keys(&vkeys, |vks| {
            with_native_keys(&pulled.keys, |oks| self.native.broadcast(vks, &natives, oks, std::mem::take(&mut pulled.natives), priority))
        })?;
        self.empty(host, &pulled)
    }

    /// `PullRowSparse`: the row ids are read now (their writers waited for: MXNet reads them in
    /// an engine op, but no non-blocking C API gives them to us); the outputs are filled once
    /// the store's pull is done.
    fn pull_row_sparse(&self, host: &Host, keys: Vec<Key>, outs: &[NDArrayHandle], row_ids: &[NDArrayHandle], priority: c_int) -> Result<()> {
        let _call = self.calls.lock();
        let mut crossed = Crossed::default();
        self.cross(host, &keys, outs, true, &mut Lending::new(host, &self.lender), &mut crossed)?;
        let mut ids = Vec::with_capacity(row_ids.len());
        for (k, r) in keys.iter().zip(row_ids) {
            let d = describe(host, *r)?;
            crossable(k, &d, "row ids array")?;
            ids.push(if d.stype == ROW_SPARSE { sparse::to_native(host, *r, &d)? } else { sparse::dense_to_native(host, *r, &d)? });
        }
        with_native_keys(&keys, |ks| self.native.pull_row_sparse(ks, &crossed.natives, &ids, priority))?;
        self.empty(host, &crossed)
    }

    /// The store's updaters calling the frontend's: on host arrays bound to the store's
    /// (`Views`) on a worker's store; on a server
    /// (Python's `kvstore_server` installs the pickled optimizer from the controller) waiting,
    /// as the server reads the value as soon as its updater returns. A dist worker keeps an
    /// updater it never calls (MXNet's does too): `None`.
    fn updaters(&self, int: MXKVStoreUpdater, string: MXKVStoreStrUpdater, user: *mut c_void) -> Result<Option<Updaters>> {
        let host = super::host().ok_or_else(|| crate::Error::new("hosted mode without a host library"))?;
        let user = user as usize;
        let on_server = self.is_dist && Role::current() == Role::Server;
        if self.is_dist && !on_server {
            return Ok(None);
        }
        let views = Arc::clone(&self.views);
        let server_views = Arc::clone(&self.server_views);
        let int: Option<IntUpdater> = int.map(|f| {
            let views = Arc::clone(&views);
            let call: IntUpdater = Arc::new(move |key: i32, recv: NDArray, local: NDArray| {
                // SAFETY: the callback the frontend installed with this signature; it owns (and
                // frees) the two new handles.
                let update = |r, l| unsafe { f(key, r, l, user as *mut c_void) };
                if on_server {
                    let dense = recv.stype() == crate::StorageType::Default && local.stype() == crate::StorageType::Default;
                    let updated = if dense { server_views.update(host, &recv, &local, update) } else { sparse::update_now(host, &recv, &local, update) };
                    if let Err(e) = updated {
                        // The stored value is unknown now: the job stops with the reason
                        // instead of training on it (MXNet's server dies on the failed wait).
                        crate::store::dist::abort_job(&format!("the hosted server's updater for key {key} failed in the host: {}", e.message()));
                    }
                } else {
                    update_on_host(host, &views, &recv, &local, update);
                }
            });
            call
        });
        let string: Option<crate::store::StrUpdater> = string.map(|f| {
            let views = Arc::clone(&views);
            let call: crate::store::StrUpdater = Arc::new(move |key: &CStr, recv: NDArray, local: NDArray| {
                let key: *const c_char = key.as_ptr();
                // SAFETY: as for the int updater; `key` lives through the call.
                update_on_host(host, &views, &recv, &local, |r, l| unsafe { f(key, r, l, user as *mut c_void) });
            });
            call
        });
        Ok(Some(Updaters { int, string }))
    }

}

impl Drop for HostedStore {
    /// Waits until neither engine uses the staging arrays and drops them; the store goes
    /// after (its drop runs a dist store's exit protocol).
    fn drop(&mut self) {
        let Some(host) = super::host() else { return };
        let staging = std::mem::take(self.staging.get_mut());
        for s in staging.values() {
            if !super::shut_down() {
                let _ = host.wait_to_write(s.host.handle);
            }
            let _ = s.native.wait_to_write();
        }
        for (_, s) in staging {
            engine().release_host_token(s.native.var());
            s.host.free(host);
        }
        self.views.free_all(host);
        self.server_views.free_all(host);
        self.lender.clear(host);
    }
}

/// The host's arrays for the FFI floor's exports (`crate::ffi::served`).
impl ServedStore for HostedStore {
    fn store(&self) -> &KVStore {
        &self.native
    }

    fn init(&self, keys: Keys, values: &[NDArrayHandle]) -> Result<()> {
        named(c"KVStoreInit", || HostedStore::init(self, host()?, keys_of(keys), values))
    }

    fn push(&self, keys: Keys, values: &[NDArrayHandle], priority: c_int) -> Result<()> {
        named(c"KVStorePush", || HostedStore::push(self, host()?, keys_of(keys), values, priority))
    }

    fn pull(&self, keys: Keys, outs: &[NDArrayHandle], priority: c_int, ignore_sparse: bool) -> Result<()> {
        named(c"KVStorePull", || HostedStore::pull(self, host()?, keys_of(keys), outs, priority, ignore_sparse))
    }

    fn pull_row_sparse(&self, keys: Keys, outs: &[NDArrayHandle], row_ids: &[NDArrayHandle], priority: c_int) -> Result<()> {
        named(c"KVStorePullRowSparse", || HostedStore::pull_row_sparse(self, host()?, keys_of(keys), outs, row_ids, priority))
    }

    fn push_pull(&self, (vkeys, okeys): (Keys, Keys), values: &[NDArrayHandle], outs: &[NDArrayHandle], priority: c_int) -> Result<()> {
        named(c"KVStorePushPull", || HostedStore::push_pull(self, host()?, keys_of(vkeys), values, keys_of(okeys), outs, priority))
    }

    fn broadcast(&self, (vkeys, okeys): (Keys, Keys), values: &[NDArrayHandle], outs: &[NDArrayHandle], priority: c_int) -> Result<()> {
        named(c"KVStoreBroadcast", || HostedStore::broadcast(self, host()?, keys_of(vkeys), values, keys_of(okeys), outs, priority))
    }

    fn updaters(&self, int: MXKVStoreUpdater, string: MXKVStoreStrUpdater, user: *mut c_void) -> Result<Option<Updaters>> {
        HostedStore::updaters(self, int, string, user)
    }
}

fn host() -> Result<&'static Host> {
    super::host().ok_or_else(|| crate::Error::new("hosted mode without a host library"))
}

fn keys_of(keys: Keys) -> Vec<Key> {
    match keys {
        Keys::Int(k) => k.iter().map(|&k| Key::Int(k)).collect(),
        Keys::Str(k) => k.iter().map(|s| Key::Str(s.to_string())).collect(),
    }
}

/// A call's host copies (into its staging arrays, or out of them).
fn copies(host: &Host, crossed: &Crossed) -> Result<()> {
    crossed.copies.iter().try_for_each(|(from, to)| host.copy(*from, *to))
}

/// One updater call on a worker's store: host arrays over the sum and the stored value, the
/// frontend's updater queuing its host ops on them. row_sparse arrays cross by their
/// parts, waiting. A failure that leaves the stored value unknown is kept on it, for the next
/// pull to report.
fn update_on_host(host: &Host, views: &Views, recv: &NDArray, local: &NDArray, update: impl FnOnce(NDArrayHandle, NDArrayHandle)) {
    let outcome = if recv.stype() != crate::StorageType::Default || local.stype() != crate::StorageType::Default {
        sparse::update_now(host, recv, local, update)
    } else {
        dense_update(host, views, recv, local, update)
    };
    if let Err(e) = outcome {
        let why = format!("the hosted updater failed: {}", e.message());
        engine().push(&[], &[local.var()], 0, move |_| Err(crate::Error::new(why)));
    }
}

fn dense_update(host: &Host, views: &Views, recv: &NDArray, local: &NDArray, update: impl FnOnce(NDArrayHandle, NDArrayHandle)) -> Result<()> {
    // The views are the arrays' dependencies (`Views::over`): the host orders the updater's
    // ops with the store's.
    let (r, l) = host.shallow_copies(views.over(host, recv)?, views.over(host, local)?)?;
    update(r, l);
    Ok(())
}

/// The test-only negative control (`KVSTORE_HOSTED_TEST_DROP_SOURCE=1`): a key pushed several
/// values in one call loses its last one, so comparisons against pure MXNet must fail.
fn drop_last_sources_for_test(crossed: &mut Crossed) {
    if !drop_source_for_test() {
        return;
    }
    let mut count: HashMap<Key, usize> = HashMap::new();
    for k in &crossed.keys {
        *count.entry(k.clone()).or_insert(0) += 1;
    }
    let mut keep = vec![true; crossed.keys.len()];
    for (i, k) in crossed.keys.iter().enumerate().rev() {
        if let Some(n) = count.get_mut(k) {
            if *n > 1 {
                keep[i] = false;
                *n = 0;
            }
        }
    }
    let mut it = keep.iter();
    crossed.keys.retain(|_| *it.next().unwrap_or(&true));
    let mut it = keep.iter();
    crossed.natives.retain(|_| *it.next().unwrap_or(&true));
}
