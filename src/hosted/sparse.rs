//! Crossing the host's row_sparse arrays (and the arrays an updater gets where one of them is
//! row_sparse) into libkvstore's store and back, on the calling thread.
//!
//! A host row_sparse array's layout is the host's, so it crosses over by its parts: the host
//! copies out its values and row ids (`MXNDArrayGetDataNDArray`, `MXNDArrayGetAuxNDArray`,
//! which wait for the array's writers), and a native row_sparse array is built from them
//! (its row ids checked sorted, unique and in range). Back, a pulled native array's rows fill
//! store-owned host arrays, which the host assembles into a row_sparse array
//! (`MXNDArraySyncCopyFromNDArray`, as MXNet's own `row_sparse_array((data, indices))`), and
//! the host's `_copyto` writes that into the output, ordered after the output's earlier users
//! by the host's engine. Each crossing waits on the calling thread.

use super::dlpack::HostArray;
use super::host::{Described, Host, ROW_SPARSE};
use crate::engine::engine;
use crate::ffi::NDArrayHandle;
use crate::{Context, DType, NDArray, Result, StorageType};
use std::os::raw::c_int;
use std::sync::OnceLock;

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

/// A host shape as a native one (negative dimensions, which hosts never report, as 0).
pub(super) fn dims(shape: &[i64]) -> Vec<usize> {
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

/// A host row_sparse array as a new native one (its row ids checked sorted, unique and in
/// range), after the host array's pending writes.
pub(super) fn to_native(host: &Host, array: NDArrayHandle, d: &Described) -> Result<NDArray> {
    native_array(&d.shape, d.dtype, host_rows(host, array, d.dtype, &d.shape)?)
}

/// A dense host array as a new native one, after its pending writes.
pub(super) fn dense_to_native(host: &Host, array: NDArrayHandle, d: &Described) -> Result<NDArray> {
    let n = dims(&d.shape).iter().product::<usize>();
    let raw = if n == 0 { Vec::new() } else { host.read(array, n * d.dtype.size(), n)? };
    let native = NDArray::zeros(&dims(&d.shape), Context::cpu(0), d.dtype)?;
    native.copy_from_host(&raw)?;
    Ok(native)
}

/// Fills the host row_sparse array `out` (described by `d`) from a native one of its shape and
/// dtype, after the store's writes to it; the host's `_copyto` orders the write after `out`'s
/// earlier users.
pub(super) fn from_native(host: &Host, native: &NDArray, out: NDArrayHandle, d: &Described) -> Result<()> {
    let pulled = Owned(host, host_array(host, &d.shape, d.dtype, &native_rows(native)?)?);
    host.copy(pulled.1, out)
}

/// A native array crossed over for an updater: a host array over its memory (dense), or a
/// host row_sparse copy of its rows.
enum Crossed<'h> {
    Dense(HostArray),
    Sparse(Owned<'h>),
}

impl<'h> Crossed<'h> {
    fn new(host: &'h Host, array: &NDArray) -> Result<Crossed<'h>> {
        if array.stype() == StorageType::RowSparse {
            let shape: Vec<i64> = array.shape().iter().map(|&d| d as i64).collect();
            return Ok(Crossed::Sparse(Owned(host, host_array(host, &shape, array.dtype(), &native_rows(array)?)?)));
        }
        Ok(Crossed::Dense(HostArray::over_native(host, array)?))
    }

    fn handle(&self) -> NDArrayHandle {
        match self {
            Crossed::Dense(a) => a.handle,
            Crossed::Sparse(o) => o.1,
        }
    }

    /// Waits for the host's ops on it; a row_sparse copy's rows then replace `array`'s.
    fn back(self, host: &Host, array: &NDArray) -> Result<()> {
        match self {
            Crossed::Dense(view) => {
                let waited = host.wait_to_write(view.handle);
                view.free(host);
                waited
            }
            Crossed::Sparse(copy) => {
                let shape: Vec<i64> = array.shape().iter().map(|&d| d as i64).collect();
                let rows = host_rows(host, copy.1, array.dtype(), &shape)?;
                let stored_rows = array.shape().first().copied().unwrap_or(0) as i64;
                crate::ensure!(
                    rows.ids.windows(2).all(|w| w[0] < w[1]) && rows.ids.iter().all(|&r| (0..stored_rows).contains(&r)),
                    "the updater left row ids that are not sorted, unique and within the {stored_rows} rows"
                );
                let mut data = crate::base::buffer::Buffer::zeroed(rows.data.len())?;
                data.bytes_mut().copy_from_slice(&rows.data);
                engine().run_sync(&[], &[array.var()], || array.set_rows_now(&rows.ids, data))?
            }
        }
    }
}

/// One updater call, waiting on the calling thread: after the store's writes to `recv` and
/// its uses of `local`, `recv` and `local` cross over (see [`Crossed`]); `update` gets shallow
/// copies of them (the frontend frees those); then the host's ops on `local` are waited for
/// (and a row_sparse copy's rows replace `local`'s), as the store reads `local` next. For a
/// server's updates and for updates with a row_sparse array.
pub(super) fn update_now(host: &Host, recv: &NDArray, local: &NDArray, update: impl FnOnce(NDArrayHandle, NDArrayHandle)) -> Result<()> {
    engine().run_sync(&[recv.var()], &[local.var()], || ())?;
    let recv_host = Crossed::new(host, recv)?;
    let local_host = Crossed::new(host, local)?;
    let r = host.shallow_copy(recv_host.handle())?;
    let l = match host.shallow_copy(local_host.handle()) {
        Ok(l) => l,
        Err(e) => {
            drop(Owned(host, r));
            return Err(e);
        }
    };
    update(r, l);
    let back = local_host.back(host, local);
    if let Crossed::Dense(view) = recv_host {
        view.free(host);
    }
    back
}
