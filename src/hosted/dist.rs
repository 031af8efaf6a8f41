//! The hosted store's distributed stores (`dist_sync`, `dist_async`, `dist_device_sync`, ...):
//! libkvstore's own MPI store underneath, fed from per-key staging arrays that are native
//! arrays and host arrays at once (one memory, wrapped for the host with DLPack).
//!
//! The two engines do not know each other, so each hand-over waits on the calling thread:
//! a push copies the values into the staging array with host ops, waits for them, then
//! pushes the staging array natively; a pull waits for the host's users of the staging array
//! and for the native pull, then copies staging -> output with a host op (the host's readers
//! of the output are ordered after that copy by the host's engine). Correct, not fast: a push
//! waits for the ops producing its values.
//!
//! A server's updater (Python's `kvstore_server` installs the pickled optimizer from the
//! controller) gets host arrays over the server's own buffers, and the host's ops it queues
//! are waited for before the server reads the stored value again.

use super::dist_sparse::{self, SparseKeys};
use super::dlpack::HostArray;
use super::host::Host;
use super::key::{drop_source_for_test, with_native_keys, Key};
use crate::ffi::{MXKVStoreUpdater, NDArrayHandle};
use crate::reduce::SumOrder;
use crate::store::dist::Role;
use crate::store::{IntUpdater, KVStore};
use crate::{Context, DType, NDArray, Result, StorageType};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::os::raw::{c_int, c_void};
use std::sync::Arc;

/// MXNet's storage-type code of dense arrays.
const DENSE: c_int = 0;

/// A key's staging array: `native` and `host` are the same memory.
struct Staging {
    native: NDArray,
    host: HostArray,
    shape: Vec<i64>,
    dtype: DType,
    /// Store-owned copies of several pushed values, summed into the staging array.
    stages: Vec<HostArray>,
}

impl Staging {
    /// Waits until neither engine uses the staging array (or its stage copies).
    fn idle(&self, host: &Host) -> Result<()> {
        host.wait_to_write(self.host.handle)?;
        for s in &self.stages {
            host.wait_to_write(s.handle)?;
        }
        self.native.wait_to_write()
    }
}

pub(super) struct HostedDist {
    native: KVStore,
    order: SumOrder,
    staging: Mutex<HashMap<Key, Staging>>,
    /// The row_sparse keys (dist_sparse.rs).
    sparse: SparseKeys,
}

struct Described {
    shape: Vec<i64>,
    dtype: DType,
}

fn dense(host: &Host, key: &Key, array: NDArrayHandle, what: &str) -> Result<Described> {
    crate::ensure!(!array.is_null(), "NULL NDArray handle");
    let (shape, dtype, stype) = host.describe(array)?;
    crate::ensure!(
        stype == DENSE,
        "key {key}: the hosted distributed store keeps dense and row_sparse values; the {what} has storage type {stype}"
    );
    Ok(Described {
        shape,
        dtype: DType::from_code(dtype)?,
    })
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
            native: KVStore::new(lower_name)?,
            order,
            staging: Mutex::new(HashMap::new()),
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
        for (k, vs) in groups {
            let Some(s) = staging.get_mut(&k) else { continue };
            s.idle(host)?;
            if let [v] = vs.as_slice() {
                host.copy(*v, s.host.handle)?;
                host.wait_to_write(s.host.handle)?;
            } else {
                while s.stages.len() < vs.len() {
                    let stage = HostArray::new(host, s.dtype, &s.shape)?;
                    s.stages.push(stage);
                }
                for (v, stage) in vs.iter().zip(&s.stages) {
                    host.copy(*v, stage.handle)?;
                }
                for stage in &s.stages[..vs.len()] {
                    host.wait_to_write(stage.handle)?;
                }
                let used = if drop_source_for_test() { vs.len() - 1 } else { vs.len() };
                let srcs: Vec<&[u8]> = s.stages[..used]
                    .iter()
                    // SAFETY: each stage's host copy has completed (waited above) and no host
                    // op uses it until the next push, which first waits for this one.
                    .map(|st| unsafe { std::slice::from_raw_parts(st.ptr as *const u8, st.len) })
                    .collect();
                let (dtype, order) = (s.dtype, self.order);
                s.native.write_bytes(|dst| crate::reduce::sum_into(dtype, order, dst, &srcs, 1));
            }
            with_native_keys(std::slice::from_ref(&k), |ks| {
                self.native.push(ks, vec![s.native.clone()], priority)
            })?;
        }
        sparse.run(&self.native, priority)
    }

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
        let (planned_keys, planned_outs): (Vec<Key>, Vec<NDArrayHandle>) = planned.into_iter().unzip();
        for (k, outs) in group(planned_keys, &planned_outs) {
            let Some(s) = staging.get(&k) else { continue };
            // The host's earlier copies out of (and into) the staging array must be done
            // before the native pull overwrites it.
            host.wait_to_write(s.host.handle)?;
            with_native_keys(std::slice::from_ref(&k), |ks| {
                self.native.pull(ks, vec![s.native.clone()], priority, true)
            })?;
            s.native.wait_to_read()?;
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
                if let Err(e) = call_on_host(host, f, user, key, &recv, &local) {
                    eprintln!("libkvstore: the hosted server's updater for key {key} failed: {}", e.message());
                }
            });
            call
        });
        self.native.set_int_updater(updater);
        Ok(())
    }

    /// Waits until no op uses the staging arrays, drops them, then the native store (whose
    /// exit protocol runs then).
    pub fn free(self, host: &Host) {
        let staging = self.staging.into_inner();
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
