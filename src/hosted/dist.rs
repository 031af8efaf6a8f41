//! The hosted store's distributed stores (`dist_sync`, `dist_async`, `dist_device_sync`, ...):
//! libkvstore's own MPI store underneath, fed from per-key staging arrays that are native
//! arrays and host arrays at once (one memory, wrapped for the host with DLPack).
//!
//! The two engines do not know each other; each push and pull is one asynchronous op in the
//! host's engine (`async_op`) that declares the host arrays it reads and writes, starts the
//! native push or pull, and is completed by a native op ordered after the native side's use
//! of the staging array. So the host orders everything around the staging array: a push runs
//! after the ops producing its values, the next copy into the staging array waits for the
//! native push to be done with it, and the copy out of a pulled staging array (and so the
//! output's readers) waits for the native pull. Calls return at once; validation comes first,
//! and a refused call queues nothing. Init is synchronous.
//!
//! A server's updater (Python's `kvstore_server` installs the pickled optimizer from the
//! controller) gets host arrays over the server's own buffers, and the host's ops it queues
//! are waited for before the server reads the stored value again.

use super::async_op::{push_async, HostDone, Property};
use super::dist_sparse::{self, SparseKeys};
use super::dlpack::HostArray;
use super::host::{describe, Described, Host, DENSE};
use super::key::{drop_source_for_test, with_native_keys, Key};
use crate::ffi::{MXKVStoreUpdater, NDArrayHandle};
use crate::reduce::SumOrder;
use crate::store::dist::Role;
use crate::engine::engine;
use crate::store::{IntUpdater, KVStore};
use crate::{Context, DType, NDArray, Result, StorageType};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::os::raw::{c_int, c_void};
use std::sync::{Arc, Weak};

/// A key's staging array: `native` and `host` are the same memory.
struct Staging {
    native: NDArray,
    host: HostArray,
    shape: Vec<i64>,
    dtype: DType,
    /// Store-owned copies of several pushed values, summed into the staging array.
    stages: Vec<HostArray>,
}

pub(super) struct HostedDist {
    /// The only strong reference: the ops queued by pushes and pulls hold weak ones, so the
    /// native store (whose drop runs the dist exit protocol) goes when the hosted store does.
    native: Arc<KVStore>,
    order: SumOrder,
    staging: Mutex<HashMap<Key, Staging>>,
    /// The failure of an asynchronous push or pull, for the next call to report.
    failed: Arc<Mutex<Option<String>>>,
    /// The row_sparse keys (dist_sparse.rs).
    sparse: SparseKeys,
}

/// A sum of several pushed values into the staging array, run by the push's host op.
struct Sum {
    dtype: DType,
    order: SumOrder,
    dst: (*mut u8, usize),
    srcs: Vec<(*const u8, usize)>,
}

// SAFETY: the pointers are into the staging array and its stage arrays, which the host op
// running the sum declares (stages read, staging written) and which the store frees only
// after waiting for that op.
unsafe impl Send for Sum {}

impl Sum {
    fn run(self) {
        // SAFETY: as above: while the op runs, no host op touches these arrays, and no native
        // op touches the staging array (the previous push or pull of the key completed its
        // host op only after its native part was done); the stages are distinct from it.
        let (dst, srcs) = unsafe {
            let dst = std::slice::from_raw_parts_mut(self.dst.0, self.dst.1);
            let srcs: Vec<&[u8]> = self.srcs.iter().map(|&(p, n)| std::slice::from_raw_parts(p, n)).collect();
            (dst, srcs)
        };
        crate::reduce::sum_into(self.dtype, self.order, dst, &srcs, 1);
    }
}

/// Keeps `error` for the next call on the store, and says it now (the call that queued the
/// op has returned).
fn record(failed: &Mutex<Option<String>>, error: String) {
    eprintln!("libkvstore: hosted dist store: {error}");
    failed.lock().get_or_insert(error);
}

/// The completion of a pull's host op, run by a native op reading the staging array. Dropped
/// without running (the native pull failed, and its failure is on the array), it reports
/// that failure and still completes the host op.
struct PullDone {
    key: Key,
    array: NDArray,
    failed: Arc<Mutex<Option<String>>>,
    done: Option<HostDone>,
}

impl PullDone {
    fn finish(mut self) {
        if let Some(d) = self.done.take() {
            d.finish();
        }
    }
}

impl Drop for PullDone {
    fn drop(&mut self) {
        if let Some(d) = self.done.take() {
            // Only reads the array, as the op this was for: it waits for nothing.
            let why = self.array.wait_to_read().err().map_or_else(|| "it did not complete".to_string(), |e| e.message().to_string());
            let why = format!("the pull of key {} failed: {why}", self.key);
            record(&self.failed, why.clone());
            d.fail(&why);
        }
    }
}

fn dense(host: &Host, key: &Key, array: NDArrayHandle, what: &str) -> Result<Described> {
    let d = describe(host, array)?;
    crate::ensure!(
        d.stype == DENSE,
        "key {key}: the hosted distributed store keeps dense and row_sparse values; the {what} has storage type {}",
        d.stype
    );
    Ok(d)
}

fn check_shape(key: &Key, s: &Staging, d: &Described, what: &str) -> Result<()> {
    crate::ensure!(
        d.shape == s.shape,
        "shape mismatch for key {key}: the stored value has shape {:?}, the {what} {:?}",
        s.shape,
        d.shape
    );
    Ok(())
}

/// Keys grouped with their handles, in first-appearance order.
fn group(keys: Vec<Key>, handles: &[NDArrayHandle]) -> Vec<(Key, Vec<NDArrayHandle>)> {
    let mut groups: Vec<(Key, Vec<NDArrayHandle>)> = Vec::new();
    for (k, h) in keys.into_iter().zip(handles) {
        match groups.iter_mut().find(|(g, _)| *g == k) {
            Some((_, hs)) => hs.push(*h),
            None => groups.push((k, vec![*h])),
        }
    }
    groups
}

/// One server-side update: `recv` and `local` (native, the server's buffers) wrapped as host
/// arrays; the updater gets shallow copies it frees, as the local hosted store's updaters do;
/// then the host's ops of the update (the optimizer's, queued in the host's engine) are waited
/// for, because the server reads `local` natively as soon as this returns.
fn call_on_host(host: &Host, f: UpdaterFn, user: usize, key: i32, recv: &NDArray, local: &NDArray) -> Result<()> {
    if recv.stype() == StorageType::RowSparse || local.stype() == StorageType::RowSparse {
        // SAFETY: the callback the frontend installed with this signature; it owns (and
        // frees) the two new handles.
        return dist_sparse::update_on_host(host, recv, local, |r, l| unsafe { f(key, r, l, user as *mut c_void) });
    }
    let recv_host = HostArray::over_native(host, recv)?;
    let local_host = HostArray::over_native(host, local);
    let local_host = match local_host {
        Ok(l) => l,
        Err(e) => {
            recv_host.free(host);
            return Err(e);
        }
    };
    let handles = host
        .shallow_copy(recv_host.handle)
        .and_then(|r| host.shallow_copy(local_host.handle).map(|l| (r, l)));
    if let Ok((r, l)) = handles {
        // SAFETY: the callback the frontend installed with this signature; it owns (and
        // frees) the two new handles.
        unsafe { f(key, r, l, user as *mut c_void) };
    }
    let waited = host.wait_to_write(local_host.handle);
    recv_host.free(host);
    local_host.free(host);
    handles.and(waited)
}

type UpdaterFn = unsafe extern "C" fn(c_int, NDArrayHandle, NDArrayHandle, *mut c_void);

impl HostedDist {
    /// Joins the MPI job in this process's role (`DMLC_ROLE`), as libkvstore's own store does.
    pub fn new(lower_name: &str) -> Result<HostedDist> {
        let order = if lower_name.contains("device") { SumOrder::Serial } else { SumOrder::CpuComm };
        Ok(HostedDist {
            native: Arc::new(KVStore::new(lower_name)?),
            order,
            staging: Mutex::new(HashMap::new()),
            failed: Arc::new(Mutex::new(None)),
            sparse: SparseKeys::default(),
        })
    }

    pub fn init(&self, host: &Host, keys: Vec<Key>, values: &[NDArrayHandle]) -> Result<()> {
        let mut staging = self.staging.lock();
        let (keys, values, sparse) = self.sparse.plan_init(host, keys, values, |k| staging.contains_key(k))?;
        if keys.is_empty() && !sparse.is_empty() {
            return sparse.run(&self.native);
        }
        let values = values.as_slice();
        let mut made = Vec::with_capacity(keys.len());
        for (k, v) in keys.iter().zip(values) {
            crate::ensure!(
                !staging.contains_key(k) && !made.iter().any(|(p, _): &(&Key, Staging)| *p == k),
                "key {k} has already been inited"
            );
            let d = dense(host, k, *v, "value")?;
            let dims: Vec<usize> = d.shape.iter().map(|&x| usize::try_from(x).unwrap_or(0)).collect();
            let native = NDArray::zeros(&dims, Context::cpu(0), d.dtype)?;
            let host_view = HostArray::over_native(host, &native)?;
            made.push((
                k,
                Staging {
                    native,
                    host: host_view,
                    shape: d.shape,
                    dtype: d.dtype,
                    stages: Vec::new(),
                },
            ));
        }
        for ((_, s), v) in made.iter().zip(values) {
            host.copy(*v, s.host.handle)?;
            host.wait_to_write(s.host.handle)?;
        }
        let natives: Vec<NDArray> = made.iter().map(|(_, s)| s.native.clone()).collect();
        with_native_keys(&keys, |ks| self.native.init(ks, &natives))?;
        for (k, s) in made {
            s.native.wait_to_write()?;
            staging.insert(k.clone(), s);
        }
        sparse.run(&self.native)
    }

    /// The failure of an earlier asynchronous push or pull, reported once, by the next call.
    fn earlier_failure(&self) -> Result<()> {
        match self.failed.lock().take() {
            Some(e) => Err(crate::Error::new(e)),
            None => Ok(()),
        }
    }

    /// Push: validation on the calling thread (a refused call queues nothing); then per key
    /// the host's `_copyto`s of the values into the staging array (one value) or its stage
    /// arrays (several), and one asynchronous host op that reads them (and, summing several,
    /// writes the staging array), sums, and hands the staging array to the native push. The
    /// op completes when the native push has finished with the staging array (every server
    /// has answered), so the host's next copy into it waits for that. Returns at once.
    pub fn push(&self, host: &Host, keys: Vec<Key>, values: &[NDArrayHandle], priority: c_int) -> Result<()> {
        let mut staging = self.staging.lock();
        let (keys, values, sparse) = self.sparse.plan_push(host, keys, values, |k| staging.contains_key(k))?;
        let values = values.as_slice();
        let groups = group(keys, values);
        for (k, vs) in &groups {
            let s = staging
                .get(k)
                .ok_or_else(|| crate::Error::new(format!("key {k} has not been inited")))?;
            for v in vs {
                let d = dense(host, k, *v, "pushed value")?;
                check_shape(k, s, &d, "pushed value")?;
                crate::ensure!(
                    d.dtype == s.dtype,
                    "dtype mismatch for key {k}: the stored value is {}, the pushed value {}",
                    s.dtype.name(),
                    d.dtype.name()
                );
            }
        }
        self.earlier_failure()?;
        self.native.check_push_ready()?;
        for (k, vs) in groups {
            let Some(s) = staging.get_mut(&k) else { continue };
            let (reads, writes, sum) = if let [v] = vs.as_slice() {
                host.copy(*v, s.host.handle)?;
                (vec![s.host.handle], vec![], None)
            } else {
                while s.stages.len() < vs.len() {
                    let stage = HostArray::new(host, s.dtype, &s.shape)?;
                    s.stages.push(stage);
                }
                for (v, stage) in vs.iter().zip(&s.stages) {
                    host.copy(*v, stage.handle)?;
                }
                let used = if drop_source_for_test() { vs.len() - 1 } else { vs.len() };
                let sum = Sum {
                    dtype: s.dtype,
                    order: self.order,
                    dst: (s.host.ptr, s.host.len),
                    srcs: s.stages[..used].iter().map(|st| (st.ptr as *const u8, st.len)).collect(),
                };
                let reads: Vec<NDArrayHandle> = s.stages[..vs.len()].iter().map(|st| st.handle).collect();
                (reads, vec![s.host.handle], Some(sum))
            };
            let (native, failed, array) = (Arc::downgrade(&self.native), Arc::clone(&self.failed), s.native.clone());
            let key = k.clone();
            push_async(host, &reads, &writes, priority, (c"KVStoreDistPush", Property::Normal), move |done| {
                if let Some(sum) = sum {
                    sum.run();
                }
                // A store freed meanwhile has nothing left to report to.
                let Some(native) = Weak::upgrade(&native) else { return done.finish() };
                let pushed = with_native_keys(std::slice::from_ref(&key), |ks| native.push(ks, vec![array.clone()], priority));
                drop(native);
                match pushed {
                    // Declared as a write of the staging array: it runs once the native push,
                    // which reads it until every server has answered, is done.
                    Ok(()) => {
                        let var = array.clone();
                        engine().push_async(&[], &[var.var()], priority, move |_, native_done| {
                            native_done.finish(Ok(()));
                            done.finish();
                            drop(array);
                        })
                    }
                    Err(e) => {
                        let why = format!("the push of key {key} failed: {}", e.message());
                        record(&failed, why.clone());
                        done.fail(&why);
                    }
                }
            })?;
        }
        sparse.run(&self.native, priority)
    }

    /// Pull: validation on the calling thread; then per key one asynchronous host op writing
    /// the staging array, which starts the native pull into it and completes when the native
    /// write is done; then the host's `_copyto(staging -> out)` for each output, which the
    /// host orders after that op (and the output's readers after the copy). Returns at once.
    pub fn pull(&self, host: &Host, keys: Vec<Key>, outs: &[NDArrayHandle], priority: c_int, ignore_sparse: bool) -> Result<()> {
        let staging = self.staging.lock();
        let (keys, outs) = self.sparse.plan_pull(host, keys, outs, ignore_sparse, |k| staging.contains_key(k))?;
        let outs = outs.as_slice();
        let mut planned = Vec::new();
        for (k, o) in keys.iter().zip(outs) {
            let s = staging
                .get(k)
                .ok_or_else(|| crate::Error::new(format!("key {k} has not been inited")))?;
            crate::ensure!(!o.is_null(), "NULL NDArray handle");
            let (_, _, stype) = host.describe(*o)?;
            if stype != DENSE && ignore_sparse {
                continue;
            }
            let d = dense(host, k, *o, "pull output")?;
            // Pulls cast, as MXNet's CopyFromTo does: only the shape must match.
            check_shape(k, s, &d, "pull output")?;
            planned.push((k.clone(), *o));
        }
        self.earlier_failure()?;
        let (planned_keys, planned_outs): (Vec<Key>, Vec<NDArrayHandle>) = planned.into_iter().unzip();
        for (k, outs) in group(planned_keys, &planned_outs) {
            let Some(s) = staging.get(&k) else { continue };
            let (native, failed, array) = (Arc::downgrade(&self.native), Arc::clone(&self.failed), s.native.clone());
            let key = k.clone();
            push_async(host, &[], &[s.host.handle], priority, (c"KVStoreDistPull", Property::Normal), move |done| {
                let Some(native) = Weak::upgrade(&native) else { return done.finish() };
                let pulled = with_native_keys(std::slice::from_ref(&key), |ks| native.pull(ks, vec![array.clone()], priority, true));
                drop(native);
                if let Err(e) = pulled {
                    let why = format!("the pull of key {key} failed: {}", e.message());
                    record(&failed, why.clone());
                    return done.fail(&why);
                }
                // Declared as a read of the staging array: it runs once the native pull has
                // written it. A failed native pull leaves its failure on the array, and this op
                // then does not run: `PullDone` reports it.
                let var = array.clone();
                let guard = PullDone { key, array, failed, done: Some(done) };
                engine().push_async(&[var.var()], &[], priority, move |_, native_done| {
                    native_done.finish(Ok(()));
                    guard.finish();
                })
            })?;
            for o in outs {
                host.copy(s.host.handle, o)?;
            }
        }
        Ok(())
    }

    pub fn check_push_pull(&self, host: &Host, vkeys: &[Key], values: &[NDArrayHandle], okeys: &[Key], outs: &[NDArrayHandle]) -> Result<()> {
        self.sparse.check_push_pull(host, vkeys, values)?;
        self.sparse.check_push_pull(host, okeys, outs)
    }

    pub fn pull_row_sparse(&self, host: &Host, keys: Vec<Key>, outs: &[NDArrayHandle], row_ids: &[NDArrayHandle]) -> Result<()> {
        let staging = self.staging.lock();
        self.sparse.pull_row_sparse(host, &self.native, keys, outs, row_ids, |k| staging.contains_key(k))
    }

    pub fn rank(&self) -> i32 {
        self.native.rank()
    }

    pub fn group_size(&self) -> i32 {
        self.native.group_size()
    }

    pub fn barrier(&self) -> Result<()> {
        self.native.barrier()
    }

    pub fn set_barrier_before_exit(&self, barrier: bool) {
        self.native.set_barrier_before_exit(barrier)
    }

    pub fn run_server(&self, controller: Option<crate::store::dist::Controller>) -> Result<()> {
        self.native.run_server(controller)
    }

    pub fn send_command(&self, id: i32, body: &[u8]) -> Result<()> {
        self.native.send_command(id, body)
    }

    /// Gradient compression: the MPI store underneath compresses each push (this worker's
    /// sum, made uncompressed as MXNet's dist workers make it) and worker 0 forwards the
    /// setting to the servers.
    pub fn set_gradient_compression(&self, params: &[(String, String)]) -> Result<()> {
        self.native.set_gradient_compression(params)
    }

    /// `SetUpdater(Ex)`: on a server (Python's `kvstore_server` installs the pickled optimizer
    /// from the controller) the native server's updater calls the frontend's int updater with
    /// host arrays over the server's own buffers (servers see int keys only); on a worker
    /// MXNet's dist store keeps an updater it never calls, so nothing is installed.
    pub fn set_updater(&self, int: MXKVStoreUpdater, user: *mut c_void) -> Result<()> {
        if Role::current() != Role::Server {
            return Ok(());
        }
        let host = super::host().ok_or_else(|| crate::Error::new("hosted mode without a host library"))?;
        let updater: Option<IntUpdater> = int.map(|f| {
            let user = user as usize;
            let call: IntUpdater = Arc::new(move |key: i32, recv: NDArray, local: NDArray| {
                // A failure of the host's ops of the update (the updater's own Python errors
                // are printed by ctypes and swallowed, as in MXNet) leaves the stored value
                // unknown: the job stops with the reason instead of training on it (MXNet's
                // server dies on the failed wait, leaving its workers waiting).
                if let Err(e) = call_on_host(host, f, user, key, &recv, &local) {
                    crate::store::dist::abort_job(&format!("the hosted server's updater for key {key} failed in the host: {}", e.message()));
                }
            });
            call
        });
        self.native.set_int_updater(updater);
        Ok(())
    }

    /// Waits until no op uses the staging arrays (a push's or pull's host op completes after
    /// its native part), drops them, then the native store (whose exit protocol runs then).
    pub fn free(self, host: &Host) {
        let staging = self.staging.into_inner();
        for s in staging.values().filter(|_| !super::shut_down()) {
            let _ = host.wait_to_write(s.host.handle);
            for st in &s.stages {
                let _ = host.wait_to_write(st.handle);
            }
        }
        for (_, s) in staging {
            let _ = s.native.wait_to_write();
            s.host.free(host);
            for st in s.stages {
                st.free(host);
            }
        }
        drop(self.native);
    }
}
