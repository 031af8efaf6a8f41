//! row_sparse keys of the hosted distributed stores: Init, Push and PullRowSparse of the
//! host's row_sparse arrays over libkvstore's MPI store, and the servers' updates of
//! row_sparse keys.
//!
//! A host row_sparse array's layout is the host's, so it crosses over by its parts: the host
//! copies out its values and row ids (`MXNDArrayGetDataNDArray`, `MXNDArrayGetAuxNDArray`,
//! which wait for the array's writers), and a native row_sparse array is built from them
//! (its row ids checked sorted, unique and in range). Back, a pulled native array's rows fill
//! store-owned host arrays, which the host assembles into a row_sparse array
//! (`MXNDArraySyncCopyFromNDArray`, as MXNet's own `row_sparse_array((data, indices))`), and
//! the host's `_copyto` writes that into the output, ordered after the output's earlier users
//! by the host's engine. Each crossing waits on the calling thread, as the dense part does.
//!
//! Everything a call takes is checked, and its arrays are crossed over, before libkvstore's
//! store is called; that store checks the whole call again before it queues anything.

use super::dlpack::HostArray;
use super::host::{check_row_sparse_pull, describe, Host, DENSE, ROW_SPARSE};
use super::key::{with_native_keys, Key};
use crate::engine::engine;
use crate::ffi::NDArrayHandle;
use crate::store::KVStore;
use crate::{Context, DType, NDArray, Result, StorageType};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::os::raw::c_int;
use std::sync::OnceLock;


/// What a row_sparse key holds; its value lives on the servers.
struct SparseKey {
    shape: Vec<i64>,
    dtype: DType,
}

/// The row_sparse keys of one hosted distributed store.
#[derive(Default)]
pub(super) struct SparseKeys {
    keys: Mutex<HashMap<Key, SparseKey>>,
}

/// The host functions that read and fill a row_sparse array's parts, typed as MXNet 1.9's
/// c_api.h declares them.
struct PartsApi {
    get_data: unsafe extern "C" fn(NDArrayHandle, *mut NDArrayHandle) -> c_int,
    get_aux: unsafe extern "C" fn(NDArrayHandle, u32, *mut NDArrayHandle) -> c_int,
    sync_copy_from: unsafe extern "C" fn(NDArrayHandle, NDArrayHandle, c_int) -> c_int,
}

fn parts_api(host: &Host) -> Result<&'static PartsApi> {
    static API: OnceLock<std::result::Result<PartsApi, String>> = OnceLock::new();
    let resolved = API.get_or_init(|| {
        let find = |name: &str| host.address(name).ok_or_else(|| format!("the host library does not export {name}"));
        let (data, aux, copy) = (
            find("MXNDArrayGetDataNDArray")?,
            find("MXNDArrayGetAuxNDArray")?,
            find("MXNDArraySyncCopyFromNDArray")?,
        );
        // SAFETY: each address is the host's function of that name, whose C type (MXNet 1.9's
        // c_api.h) is the field's; the host is checked to be MXNet 1.9.x when it is loaded.
        Ok(unsafe {
            PartsApi {
                get_data: std::mem::transmute::<*mut (), unsafe extern "C" fn(NDArrayHandle, *mut NDArrayHandle) -> c_int>(data),
                get_aux: std::mem::transmute::<*mut (), unsafe extern "C" fn(NDArrayHandle, u32, *mut NDArrayHandle) -> c_int>(aux),
                sync_copy_from: std::mem::transmute::<*mut (), unsafe extern "C" fn(NDArrayHandle, NDArrayHandle, c_int) -> c_int>(copy),
            }
        })
    });
    resolved.as_ref().map_err(|e| crate::Error::new(e.clone()))
}

/// A row_sparse value's rows: sorted, unique row ids and the rows' bytes, one after another.
struct Rows {
    ids: Vec<i64>,
    data: Vec<u8>,
}

/// A host handle this module made, freed when dropped without waiting: the host ops queued
/// on it hold their own references.
struct Owned<'h>(&'h Host, NDArrayHandle);

impl Drop for Owned<'_> {
    fn drop(&mut self) {
        if !super::shut_down() {
            // SAFETY: a live handle this module owns; nothing of the store uses it afterwards.
            unsafe { (self.0.api.free)(self.1) };
        }
    }
}

fn dims(shape: &[i64]) -> Vec<usize> {
    shape.iter().map(|&d| usize::try_from(d).unwrap_or(0)).collect()
}

fn row_len(shape: &[i64]) -> usize {
    dims(shape).iter().skip(1).product()
}

/// The rows of a host row_sparse array of `dtype` and `shape` (as described), after its
/// pending writes (the host's part copies wait for them).
fn host_rows(host: &Host, array: NDArrayHandle, dtype: DType, shape: &[i64]) -> Result<Rows> {
    let api = parts_api(host)?;
    let (mut data, mut aux) = (std::ptr::null_mut(), std::ptr::null_mut());
    // SAFETY: a row_sparse host handle (the caller described it) and live out-pointers.
    host.check(unsafe { (api.get_data)(array, &mut data) }, "MXNDArrayGetDataNDArray")?;
    let data = Owned(host, data);
    // SAFETY: as above; aux 0 of a row_sparse array is its row ids.
    host.check(unsafe { (api.get_aux)(array, 0, &mut aux) }, "MXNDArrayGetAuxNDArray")?;
    let aux = Owned(host, aux);
    let (ids_shape, ids_dtype, _) = host.describe(aux.1)?;
    let ids_dtype = DType::from_code(ids_dtype)?;
    let nnz = dims(&ids_shape).iter().product::<usize>();
    let (values_shape, _, _) = host.describe(data.1)?;
    let values = dims(&values_shape).iter().product::<usize>();
    let elements = nnz * row_len(shape);
    crate::ensure!(
        values == elements,
        "inconsistent row_sparse array: {nnz} row ids for {values} values of rows of {}",
        row_len(shape)
    );
    if nnz == 0 {
        return Ok(Rows { ids: Vec::new(), data: Vec::new() });
    }
    let raw_ids = host.read(aux.1, nnz * ids_dtype.size(), nnz)?;
    let mut ids = vec![0i64; nnz];
    crate::base::cast(ids_dtype, &raw_ids, DType::Int64, bytemuck::cast_slice_mut(&mut ids));
    let data = host.read(data.1, elements * dtype.size(), elements)?;
    Ok(Rows { ids, data })
}

/// A native row_sparse array of `rows` (refused unless its row ids are sorted, unique and
/// in range).
fn native_array(shape: &[i64], dtype: DType, rows: Rows) -> Result<NDArray> {
    let shape = dims(shape);
    let out = NDArray::empty_row_sparse(&shape, Context::cpu(0), dtype)?;
    if rows.ids.is_empty() {
        return Ok(out);
    }
    let mut values_shape = shape.clone();
    values_shape[0] = rows.ids.len();
    let values = NDArray::zeros(&values_shape, Context::cpu(0), dtype)?;
    values.copy_from_host(&rows.data)?;
    let ids = NDArray::zeros(&[rows.ids.len()], Context::cpu(0), DType::Int64)?;
    ids.copy_from_host(bytemuck::cast_slice(&rows.ids))?;
    out.set_sparse_data_from(&values)?;
    out.set_aux_from(0, &ids)?;
    Ok(out)
}

/// The rows of a native row_sparse array, after its pending writes.
fn native_rows(array: &NDArray) -> Result<Rows> {
    let rows = engine().run_sync(&[array.var()], &[], || array.rows_now())??;
    Ok(Rows { ids: rows.ids, data: rows.data })
}

/// A new host row_sparse array (cpu(0)) of `dtype` holding `rows`; the caller owns it.
fn host_array(host: &Host, shape: &[i64], dtype: DType, rows: &Rows) -> Result<NDArrayHandle> {
    let nnz = rows.ids.len();
    let dims32: Vec<u32> = shape
        .iter()
        .map(|&d| u32::try_from(d).map_err(|_| crate::Error::new(format!("dimension {d} is too large"))))
        .collect::<Result<_>>()?;
    let nnz32 = u32::try_from(nnz).map_err(|_| crate::Error::new("too many rows"))?;
    let (mut aux_type, mut aux_ndim, aux_shape) = (DType::Int64.code() as c_int, 1u32, [nnz32]);
    let mut out = std::ptr::null_mut();
    // SAFETY: MXNDArrayCreateSparseEx(row_sparse, shape, cpu(0), allocated unless empty, dtype,
    // one int64 aux of shape (nnz,)); every pointer is a live local for the call.
    let rc = unsafe {
        (host.api.create_sparse_ex)(
            ROW_SPARSE,
            dims32.as_ptr(),
            dims32.len() as u32,
            1,
            0,
            (nnz == 0) as c_int,
            dtype.code() as c_int,
            1,
            &mut aux_type,
            &mut aux_ndim,
            aux_shape.as_ptr(),
            &mut out,
        )
    };
    host.check(rc, "MXNDArrayCreateSparseEx")?;
    let out = Owned(host, out);
    if nnz > 0 {
        let api = parts_api(host)?;
        let mut values_shape = shape.to_vec();
        values_shape[0] = nnz as i64;
        let values = HostArray::new(host, dtype, &values_shape)?;
        let ids = HostArray::new(host, DType::Int64, &[nnz as i64]);
        let ids = match ids {
            Ok(ids) => ids,
            Err(e) => {
                values.free(host);
                return Err(e);
            }
        };
        // SAFETY: both arrays are new: no host op uses their memory yet, which holds exactly
        // `nnz` rows and `nnz` int64s.
        unsafe {
            std::ptr::copy_nonoverlapping(rows.data.as_ptr(), values.ptr, values.len.min(rows.data.len()));
            std::ptr::copy_nonoverlapping(rows.ids.as_ptr() as *const u8, ids.ptr, ids.len.min(nnz * 8));
        }
        // SAFETY: live handles; the host copies (and waits for) each part.
        let copied = host
            .check(unsafe { (api.sync_copy_from)(out.1, values.handle, -1) }, "MXNDArraySyncCopyFromNDArray")
            .and_then(|_| host.check(unsafe { (api.sync_copy_from)(out.1, ids.handle, 0) }, "MXNDArraySyncCopyFromNDArray"));
        values.free(host);
        ids.free(host);
        copied?;
    }
    let handle = out.1;
    std::mem::forget(out);
    Ok(handle)
}

/// Casts rows' bytes from one dtype to another, as MXNet's copy between arrays does.
fn cast_rows(rows: Rows, from: DType, to: DType) -> Rows {
    if from == to {
        return rows;
    }
    let n = rows.data.len() / from.size().max(1);
    let mut data = vec![0u8; n * to.size()];
    crate::base::cast(from, &rows.data, to, &mut data);
    Rows { ids: rows.ids, data }
}

/// The row_sparse part of one init, crossed over and checked; [`SparseInit::run`] inits it.
#[must_use]
pub(super) struct SparseInit<'a> {
    keys: Vec<Key>,
    values: Vec<NDArray>,
    held: Vec<SparseKey>,
    into: &'a SparseKeys,
}

impl SparseInit<'_> {
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Inits the row_sparse keys in libkvstore's store (worker 0 sends the values; every
    /// worker meets at its barrier) and records them.
    pub fn run(self, native: &KVStore) -> Result<()> {
        if self.keys.is_empty() {
            return Ok(());
        }
        with_native_keys(&self.keys, |ks| native.init(ks, &self.values))?;
        let mut held = self.into.keys.lock();
        for (k, s) in self.keys.into_iter().zip(self.held) {
            held.insert(k, s);
        }
        Ok(())
    }
}

/// The row_sparse part of one push, crossed over and checked; [`SparsePush::run`] pushes it.
#[must_use]
pub(super) struct SparsePush {
    keys: Vec<Key>,
    values: Vec<NDArray>,
}

impl SparsePush {
    /// Pushes the row_sparse values to libkvstore's store, which sums each key's values.
    pub fn run(self, native: &KVStore, priority: c_int) -> Result<()> {
        if self.keys.is_empty() {
            return Ok(());
        }
        with_native_keys(&self.keys, |ks| native.push(ks, self.values, priority))
    }
}

impl SparseKeys {
    /// Splits an init: the row_sparse values are checked and crossed over now (inited by the
    /// returned [`SparseInit`]); the dense ones are handed back. `is_dense` tells the keys
    /// the dense part holds.
    pub fn plan_init(
        &self,
        host: &Host,
        keys: Vec<Key>,
        values: &[NDArrayHandle],
        is_dense: impl Fn(&Key) -> bool,
    ) -> Result<(Vec<Key>, Vec<NDArrayHandle>, SparseInit<'_>)> {
        let held = self.keys.lock();
        let (mut dense_keys, mut dense_values) = (Vec::new(), Vec::new());
        let mut planned = Vec::new();
        for (i, (k, v)) in keys.iter().zip(values).enumerate() {
            crate::ensure!(!held.contains_key(k) && !keys[..i].contains(k), "key {k} has already been inited");
            let d = describe(host, *v)?;
            if d.stype != ROW_SPARSE {
                dense_keys.push(k.clone());
                dense_values.push(*v);
                continue;
            }
            crate::ensure!(!is_dense(k), "key {k} has already been inited");
            crate::ensure!(
                d.shape.len() >= 2 && row_len(&d.shape) > 0,
                "key {k}: a row_sparse value needs rows of at least one element"
            );
            planned.push((k.clone(), *v, d));
        }
        drop(held);
        let mut init = SparseInit { keys: Vec::new(), values: Vec::new(), held: Vec::new(), into: self };
        for (k, v, d) in planned {
            let rows = host_rows(host, v, d.dtype, &d.shape)?;
            init.values.push(native_array(&d.shape, d.dtype, rows)?);
            init.keys.push(k);
            init.held.push(SparseKey { shape: d.shape, dtype: d.dtype });
        }
        Ok((dense_keys, dense_values, init))
    }

    /// Splits a push: the row_sparse keys' values are checked and crossed over now (pushed
    /// by the returned [`SparsePush`]); the dense keys' values are handed back.
    pub fn plan_push(
        &self,
        host: &Host,
        keys: Vec<Key>,
        values: &[NDArrayHandle],
        is_dense: impl Fn(&Key) -> bool,
    ) -> Result<(Vec<Key>, Vec<NDArrayHandle>, SparsePush)> {
        let held = self.keys.lock();
        let (mut dense_keys, mut dense_values) = (Vec::new(), Vec::new());
        let mut planned = Vec::new();
        for (k, v) in keys.into_iter().zip(values) {
            let d = describe(host, *v)?;
            let Some(s) = held.get(&k) else {
                crate::ensure!(
                    d.stype != ROW_SPARSE || !is_dense(&k),
                    "key {k}: push of a row_sparse value to a default key is not supported by distributed stores"
                );
                dense_keys.push(k);
                dense_values.push(*v);
                continue;
            };
            crate::ensure!(
                d.stype == ROW_SPARSE,
                "key {k}: push of a {} value to a row_sparse key is not supported by distributed stores (row_sparse keys take row_sparse pushes and PullRowSparse)",
                if d.stype == DENSE { "default" } else { "non-row_sparse" }
            );
            crate::ensure!(
                d.shape == s.shape,
                "shape mismatch for key {k}: the stored value has shape {:?}, the pushed value {:?}",
                s.shape,
                d.shape
            );
            crate::ensure!(
                d.dtype == s.dtype,
                "dtype mismatch for key {k}: the stored value is {}, the pushed value {}",
                s.dtype.name(),
                d.dtype.name()
            );
            planned.push((k, *v, d));
        }
        let mut push = SparsePush { keys: Vec::new(), values: Vec::new() };
        for (k, v, d) in planned {
            let rows = host_rows(host, v, d.dtype, &d.shape)?;
            push.values.push(native_array(&d.shape, d.dtype, rows)?);
            push.keys.push(k);
        }
        Ok((dense_keys, dense_values, push))
    }

    /// Splits a pull: MXNet's distributed pull needs `ignore_sparse` and skips row_sparse
    /// outputs; a row_sparse key is read with PullRowSparse only. Hands back the dense
    /// outputs.
    pub fn plan_pull(
        &self,
        host: &Host,
        keys: Vec<Key>,
        outs: &[NDArrayHandle],
        ignore_sparse: bool,
        is_dense: impl Fn(&Key) -> bool,
    ) -> Result<(Vec<Key>, Vec<NDArrayHandle>)> {
        crate::ensure!(ignore_sparse, "dist kvstore pull doesn't support ignore_sparse=False");
        let held = self.keys.lock();
        let (mut dense_keys, mut dense_outs) = (Vec::new(), Vec::new());
        for (k, o) in keys.into_iter().zip(outs) {
            let sparse_key = held.contains_key(&k);
            crate::ensure!(sparse_key || is_dense(&k), "key {k} has not been inited");
            if describe(host, *o)?.stype != DENSE {
                continue;
            }
            crate::ensure!(
                !sparse_key,
                "key {k}: row_sparse keys of distributed stores are read with PullRowSparse (pull is not supported for them)"
            );
            dense_keys.push(k);
            dense_outs.push(*o);
        }
        Ok((dense_keys, dense_outs))
    }

    /// `PushPull` (a push, then a pull) takes dense values of dense keys only, as MXNet's and
    /// libkvstore's distributed stores: refused before the push when a row_sparse key, value
    /// or output takes part.
    pub fn check_push_pull(&self, host: &Host, keys: &[Key], arrays: &[NDArrayHandle]) -> Result<()> {
        let held = self.keys.lock();
        for (k, a) in keys.iter().zip(arrays) {
            crate::ensure!(
                !held.contains_key(k),
                "key {k}: row_sparse keys of distributed stores are read with PullRowSparse (push-pull is not supported for them)"
            );
            crate::ensure!(
                describe(host, *a)?.stype == DENSE,
                "key {k}: push-pull of a distributed store takes default storage values and outputs only"
            );
        }
        Ok(())
    }

    /// `PullRowSparse`: each output becomes the key's rows named by its row ids (any shape
    /// and dtype; sorted and deduplicated), cast to the output's dtype.
    pub fn pull_row_sparse(
        &self,
        host: &Host,
        native: &KVStore,
        keys: Vec<Key>,
        outs: &[NDArrayHandle],
        row_ids: &[NDArrayHandle],
        is_dense: impl Fn(&Key) -> bool,
    ) -> Result<()> {
        let held = self.keys.lock();
        let mut planned = Vec::with_capacity(outs.len());
        for (i, ((k, o), r)) in keys.iter().zip(outs).zip(row_ids).enumerate() {
            let out = describe(host, *o)?;
            let ids = describe(host, *r)?;
            let Some(s) = held.get(k) else {
                crate::ensure!(!is_dense(k), "PullRowSparse expects a row_sparse key; key {k} holds a default value");
                crate::bail!("key {k} has not been inited");
            };
            check_row_sparse_pull(&out, &ids)?;
            crate::ensure!(
                !keys[..i].contains(k),
                "RowSparsePull with multiple values is not supported yet (key {k} appears twice)"
            );
            crate::ensure!(
                out.shape == s.shape,
                "shape mismatch for key {k}: the stored value has shape {:?}, the row_sparse_pull output {:?}",
                s.shape,
                out.shape
            );
            // Checked now: building the output later must not fail on its dtype.
            super::dlpack::dl_type(out.dtype)?;
            // The ids are read now (their writers waited for): MXNet reads them in an engine
            // op, but no non-blocking C API gives them to us.
            let n = dims(&ids.shape).iter().product::<usize>();
            let raw = if n == 0 { Vec::new() } else { host.read(*r, n * ids.dtype.size(), n)? };
            let native_ids = NDArray::zeros(&[n], Context::cpu(0), ids.dtype)?;
            native_ids.copy_from_host(&raw)?;
            let native_out = NDArray::empty_row_sparse(&dims(&s.shape), Context::cpu(0), s.dtype)?;
            planned.push((*o, out.dtype, s.shape.clone(), s.dtype, native_out, native_ids));
        }
        drop(held);
        let native_outs: Vec<NDArray> = planned.iter().map(|p| p.4.clone()).collect();
        let native_ids: Vec<NDArray> = planned.iter().map(|p| p.5.clone()).collect();
        // libkvstore's store checks the ids' range for every key before it queues any pull.
        with_native_keys(&keys, |ks| native.pull_row_sparse(ks, &native_outs, &native_ids, 0))?;
        for (out, out_dtype, shape, dtype, native_out, _) in planned {
            let rows = cast_rows(native_rows(&native_out)?, dtype, out_dtype);
            let pulled = Owned(host, host_array(host, &shape, out_dtype, &rows)?);
            host.copy(pulled.1, out)?;
        }
        Ok(())
    }
}

/// One server-side update of a row_sparse key: `recv` (the round's sum) and `local` (the
/// server's stored rows) cross over as host row_sparse arrays; `update` gets shallow copies of
/// them (the frontend frees those); then the host's updated `local` rows replace the server's.
pub(super) fn update_on_host(
    host: &Host,
    recv: &NDArray,
    local: &NDArray,
    update: impl FnOnce(NDArrayHandle, NDArrayHandle),
) -> Result<()> {
    crate::ensure!(
        recv.stype() == StorageType::RowSparse && local.stype() == StorageType::RowSparse,
        "a server update of a row_sparse key needs row_sparse arrays"
    );
    let shape_of = |a: &NDArray| a.shape().iter().map(|&d| d as i64).collect::<Vec<i64>>();
    let recv_host = Owned(host, host_array(host, &shape_of(recv), recv.dtype(), &native_rows(recv)?)?);
    let local_shape = shape_of(local);
    let local_host = Owned(host, host_array(host, &local_shape, local.dtype(), &native_rows(local)?)?);
    let r = host.shallow_copy(recv_host.1)?;
    let l = match host.shallow_copy(local_host.1) {
        Ok(l) => l,
        Err(e) => {
            drop(Owned(host, r));
            return Err(e);
        }
    };
    update(r, l);
    let rows = host_rows(host, local_host.1, local.dtype(), &local_shape)?;
    let stored_rows = local.shape().first().copied().unwrap_or(0) as i64;
    crate::ensure!(
        rows.ids.windows(2).all(|w| w[0] < w[1]) && rows.ids.iter().all(|&r| (0..stored_rows).contains(&r)),
        "the updater left row ids that are not sorted, unique and within the {stored_rows} rows"
    );
    let mut data = crate::base::buffer::Buffer::zeroed(rows.data.len())?;
    data.bytes_mut().copy_from_slice(&rows.data);
    engine().run_sync(&[], &[local.var()], || local.set_rows_now(&rows.ids, data))?
}
