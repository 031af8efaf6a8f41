//! MXNet 1.9's sparse NDArray C functions: create, fill the parts, read them back.

#![allow(non_snake_case)]

use super::args::{self, Out};
use super::handle;
use super::types::NDArrayHandle;
use crate::error::Result;
use crate::ndarray::{Context, DType, NDArray, StorageType};
use std::os::raw::c_int;

/// The `(dtype, shape)` of each aux array from MXNet's flattened arguments.
fn aux_specs(num_aux: u32, aux_type: *mut c_int, aux_ndims: *mut u32, aux_shape: *const u32) -> Result<Vec<(DType, Vec<usize>)>> {
    let n = args::len(num_aux);
    let types = args::slice(aux_type, n, "aux_type")?;
    let ndims = args::slice(aux_ndims, n, "aux_ndims")?;
    let total: usize = ndims.iter().map(|&d| d as usize).sum();
    let dims = args::slice(aux_shape, total, "aux_shape")?;
    let mut specs = Vec::with_capacity(n);
    let mut at = 0;
    for (t, nd) in types.iter().zip(ndims) {
        let nd = *nd as usize;
        specs.push((DType::from_code(*t)?, dims[at..at + nd].iter().map(|&d| d as usize).collect()));
        at += nd;
    }
    Ok(specs)
}

/// Creates a sparse array (storage type 1 row_sparse, 2 csr) with `num_aux` aux arrays whose
/// dtypes, dimension counts and concatenated shapes are given.
///
/// Ownership: the caller frees `*out` with `MXNDArrayFree`.
pub extern "C" fn MXNDArrayCreateSparseEx(
    storage_type: c_int,
    shape: *const u32,
    ndim: u32,
    dev_type: c_int,
    dev_id: c_int,
    delay_alloc: c_int,
    dtype: c_int,
    num_aux: u32,
    aux_type: *mut c_int,
    aux_ndims: *mut u32,
    aux_shape: *const u32,
    out: *mut NDArrayHandle,
) -> c_int {
    let _ = delay_alloc;
    ffi_boundary!({
        let out = Out::new(out, "out")?;
        let stype = StorageType::from_code(storage_type)?;
        let shape: Vec<usize> = args::slice(shape, args::len(ndim), "shape")?.iter().map(|&d| d as usize).collect();
        let array = NDArray::sparse(
            stype,
            &shape,
            crate::gpu::usable_context(Context::from_codes(dev_type, dev_id)?)?,
            DType::from_code(dtype)?,
            &aux_specs(num_aux, aux_type, aux_ndims, aux_shape)?,
        )?;
        out.write(handle::new_ndarray(Some(array)));
        Ok(())
    })
}

/// Copies `handle_src` into `handle_dst`: `i = -1` the values (a sparse destination takes the
/// source's rows as its stored values), `i >= 0` aux array `i`. Synchronous.
///
/// Ownership: both handles stay the caller's.
pub extern "C" fn MXNDArraySyncCopyFromNDArray(handle_dst: NDArrayHandle, handle_src: NDArrayHandle, i: c_int) -> c_int {
    ffi_boundary!({
        let dst = handle::ndarray(handle_dst, "handle_dst")?;
        let src = handle::ndarray(handle_src, "handle_src")?;
        match (i, dst.stype()) {
            (-1, StorageType::Default) => crate::backend::for_context(dst.ctx()).copy_sync(&src, &dst),
            (-1, _) => dst.set_sparse_data_from(&src),
            (i, _) if i >= 0 => dst.set_aux_from(i as usize, &src),
            (i, _) => crate::bail!("i = {i}: expected -1 (values) or an aux index"),
        }
    })
}

/// The dtype code of aux array `i`.
///
/// Ownership: `*out_type` is written on success.
pub extern "C" fn MXNDArrayGetAuxType(handle: NDArrayHandle, i: u32, out_type: *mut c_int) -> c_int {
    ffi_boundary!({
        let out = Out::new(out_type, "out_type")?;
        out.write(handle::ndarray(handle, "handle")?.aux_dtype(i as usize)?.code());
        Ok(())
    })
}

/// A dense copy of aux array `i` (waits for pending writes).
///
/// Ownership: the caller frees `*out` with `MXNDArrayFree`.
pub extern "C" fn MXNDArrayGetAuxNDArray(handle: NDArrayHandle, i: u32, out: *mut NDArrayHandle) -> c_int {
    ffi_boundary!({
        let out = Out::new(out, "out")?;
        let aux = handle::ndarray(handle, "handle")?.aux_ndarray(i as usize)?;
        out.write(handle::new_ndarray(Some(aux)));
        Ok(())
    })
}

/// A dense copy of the stored values (waits for pending writes).
///
/// Ownership: the caller frees `*out` with `MXNDArrayFree`.
pub extern "C" fn MXNDArrayGetDataNDArray(handle: NDArrayHandle, out: *mut NDArrayHandle) -> c_int {
    ffi_boundary!({
        let out = Out::new(out, "out")?;
        let data = handle::ndarray(handle, "handle")?.data_ndarray()?;
        out.write(handle::new_ndarray(Some(data)));
        Ok(())
    })
}
