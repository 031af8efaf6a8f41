//! MXNet 1.9's dense NDArray C functions: enough to make, fill, read and free store values.
//!
//! Conventions: as in `kvstore.rs`. Sizes passed to the copy functions count elements, not
//! bytes, as in MXNet.

#![allow(non_snake_case)]

use super::args::{self, Out};
use super::handle;
use super::types::NDArrayHandle;
use crate::error::Result;
use crate::ndarray::{Context, DType, NDArray, UNDEFINED_STORAGE};
use std::cell::RefCell;
use std::os::raw::{c_int, c_void};

thread_local! {
    // MXNet returns shapes in thread-local buffers that the next call overwrites.
    static SHAPE_U32: RefCell<Vec<u32>> = const { RefCell::new(Vec::new()) };
    static SHAPE_I32: RefCell<Vec<i32>> = const { RefCell::new(Vec::new()) };
}

/// The array's shape as a `Vec<usize>` from C dims.
fn shape_from(shape: *const u32, ndim: u32) -> Result<Vec<usize>> {
    Ok(args::slice(shape, args::len(ndim), "shape")?.iter().map(|&d| d as usize).collect())
}

/// A dense array on `dev_type(dev_id)`, zero-filled.
fn create(shape: *const u32, ndim: u32, dev_type: c_int, dev_id: c_int, dtype: c_int) -> Result<NDArray> {
    let shape = shape_from(shape, ndim)?;
    let dtype = DType::from_code(dtype)?;
    let ctx = crate::gpu::usable_context(Context::from_codes(dev_type, dev_id)?)?;
    NDArray::zeros(&shape, ctx, dtype)
}

/// Creates an empty array: no shape, dtype -1, storage type -1 (an output to be filled later).
///
/// Ownership: the caller frees `*out` with `MXNDArrayFree`.
pub extern "C" fn MXNDArrayCreateNone(out: *mut NDArrayHandle) -> c_int {
    ffi_boundary!({
        Out::new(out, "out")?.write(handle::new_ndarray(None));
        Ok(())
    })
}

/// Creates a dense float32 array. `delay_alloc` is accepted; memory is zeroed either way.
///
/// Parameters: dev_type 1 cpu, 2 gpu (needs CUDA), 3 cpu_pinned, 5 cpu_shared.
/// Ownership: the caller frees `*out` with `MXNDArrayFree`.
pub extern "C" fn MXNDArrayCreate(
    shape: *const u32,
    ndim: u32,
    dev_type: c_int,
    dev_id: c_int,
    delay_alloc: c_int,
    out: *mut NDArrayHandle,
) -> c_int {
    let _ = delay_alloc;
    ffi_boundary!({
        let out = Out::new(out, "out")?;
        out.write(handle::new_ndarray(Some(create(shape, ndim, dev_type, dev_id, DType::Float32.code())?)));
        Ok(())
    })
}

/// Creates a dense array of MXNet dtype code `dtype` (0 float32, 1 float64, 2 float16,
/// 3 uint8, 4 int32, 5 int8, 6 int64, 7 bool, 12 bfloat16).
///
/// Ownership: the caller frees `*out` with `MXNDArrayFree`.
pub extern "C" fn MXNDArrayCreateEx(
    shape: *const u32,
    ndim: u32,
    dev_type: c_int,
    dev_id: c_int,
    delay_alloc: c_int,
    dtype: c_int,
    out: *mut NDArrayHandle,
) -> c_int {
    let _ = delay_alloc;
    ffi_boundary!({
        let out = Out::new(out, "out")?;
        out.write(handle::new_ndarray(Some(create(shape, ndim, dev_type, dev_id, dtype)?)));
        Ok(())
    })
}

/// Frees a handle. The memory lives on while other views or a store still use it.
///
/// Ownership: `handle` is invalid afterwards.
pub extern "C" fn MXNDArrayFree(handle: NDArrayHandle) -> c_int {
    ffi_boundary!({ handle::free_ndarray(handle) })
}

/// Bytes for `size` elements of `array`, checked against what it holds.
fn checked_bytes(array: &NDArray, size: usize) -> Result<usize> {
    let have = array.data_byte_len();
    let esz = array.dtype().size();
    crate::ensure!(
        size.checked_mul(esz) == Some(have),
        "memory size mismatch: the array holds {} elements, size = {size}",
        have / esz
    );
    Ok(have)
}

/// Copies `size` elements (of the array's dtype) from host memory into the array, after its
/// pending operations.
///
/// Ownership: `data` is read during the call only.
pub extern "C" fn MXNDArraySyncCopyFromCPU(handle: NDArrayHandle, data: *const c_void, size: usize) -> c_int {
    ffi_boundary!({
        let array = handle::ndarray(handle, "handle")?;
        let n = checked_bytes(&array, size)?;
        array.copy_from_host(args::slice(data as *const u8, n, "data")?)
    })
}

/// Copies the array's `size` elements to host memory, after pending writes.
///
/// Ownership: `data` is written during the call only.
pub extern "C" fn MXNDArraySyncCopyToCPU(handle: NDArrayHandle, data: *mut c_void, size: usize) -> c_int {
    ffi_boundary!({
        let array = handle::ndarray(handle, "handle")?;
        let n = checked_bytes(&array, size)?;
        array.copy_to_host(args::bytes_mut(data as *mut u8, n, "data")?)
    })
}

/// Runs `f` on the array unless the handle holds an empty array.
fn unless_empty(handle: NDArrayHandle, f: impl FnOnce(&NDArray) -> Result<()>) -> Result<()> {
    match handle::ndarray_or_empty(handle, "handle")? {
        Some(a) => f(&a),
        None => Ok(()),
    }
}

/// Waits until pending writes to the array have finished. Answers -1 with the message of an
/// asynchronous operation that failed writing it (the failure is then cleared).
///
/// Ownership: none.
pub extern "C" fn MXNDArrayWaitToRead(handle: NDArrayHandle) -> c_int {
    ffi_boundary!({ unless_empty(handle, NDArray::wait_to_read) })
}

/// Waits until pending reads and writes of the array have finished. Answers -1 with the
/// message of an asynchronous operation that failed writing it (the failure is then cleared).
///
/// Ownership: none.
pub extern "C" fn MXNDArrayWaitToWrite(handle: NDArrayHandle) -> c_int {
    ffi_boundary!({ unless_empty(handle, NDArray::wait_to_write) })
}

/// Waits until every pending operation has finished. Answers -1 with the message of the
/// first asynchronous operation that failed since the last `MXNDArrayWaitAll` (every such
/// failure is then cleared).
///
/// Ownership: none.
pub extern "C" fn MXNDArrayWaitAll() -> c_int {
    ffi_boundary!({ crate::engine::engine().wait_all() })
}

/// The array's shape, or none (`None`) for an empty array.
fn shape_of(handle: NDArrayHandle) -> Result<Option<Vec<usize>>> {
    Ok(handle::ndarray_or_empty(handle, "handle")?.map(|a| a.shape().to_vec()))
}

/// The shape (deprecated form). An empty array has 0 dimensions.
///
/// Ownership: `*out_pdata` points into a thread-local buffer valid until the next shape call
/// on this thread.
pub extern "C" fn MXNDArrayGetShape(handle: NDArrayHandle, out_dim: *mut u32, out_pdata: *mut *const u32) -> c_int {
    ffi_boundary!({
        let (dim_out, data_out) = (Out::new(out_dim, "out_dim")?, Out::new(out_pdata, "out_pdata")?);
        let shape = shape_of(handle)?.unwrap_or_default();
        let dims: Vec<u32> = shape.iter().map(|&d| u32::try_from(d).unwrap_or(u32::MAX)).collect();
        let ptr = super::thread_buffers::keep(&SHAPE_U32, dims, "the shape")? as *const _;
        dim_out.write(shape.len() as u32);
        data_out.write(ptr);
        Ok(())
    })
}

/// The shape. An empty array has 0 dimensions.
///
/// Ownership: `*out_pdata` points into a thread-local buffer valid until the next shape call
/// on this thread.
pub extern "C" fn MXNDArrayGetShapeEx(handle: NDArrayHandle, out_dim: *mut c_int, out_pdata: *mut *const c_int) -> c_int {
    ffi_boundary!({
        let (dim_out, data_out) = (Out::new(out_dim, "out_dim")?, Out::new(out_pdata, "out_pdata")?);
        let shape = shape_of(handle)?.unwrap_or_default();
        let dims: Vec<i32> = shape.iter().map(|&d| i32::try_from(d).unwrap_or(i32::MAX)).collect();
        let ptr = super::thread_buffers::keep(&SHAPE_I32, dims, "the shape")? as *const _;
        dim_out.write(shape.len() as c_int);
        data_out.write(ptr);
        Ok(())
    })
}

/// Reads one property of the array behind `handle`, or `empty` for an empty array.
fn property<T>(handle: NDArrayHandle, empty: T, f: impl FnOnce(&NDArray) -> T) -> Result<T> {
    Ok(handle::ndarray_or_empty(handle, "handle")?.as_ref().map(f).unwrap_or(empty))
}

/// The dtype code; -1 for an empty array.
///
/// Ownership: `*out_dtype` is written on success.
pub extern "C" fn MXNDArrayGetDType(handle: NDArrayHandle, out_dtype: *mut c_int) -> c_int {
    ffi_boundary!({
        let out = Out::new(out_dtype, "out_dtype")?;
        out.write(property(handle, -1, |a| a.dtype().code())?);
        Ok(())
    })
}

/// The context: device type code and id; (0, 0) for an empty array.
///
/// Ownership: both out-parameters are written on success.
pub extern "C" fn MXNDArrayGetContext(handle: NDArrayHandle, out_dev_type: *mut c_int, out_dev_id: *mut c_int) -> c_int {
    ffi_boundary!({
        let (t, i) = (Out::new(out_dev_type, "out_dev_type")?, Out::new(out_dev_id, "out_dev_id")?);
        let (dev_type, dev_id) = property(handle, (0, 0), |a| (a.ctx().dev_type as c_int, a.ctx().dev_id))?;
        t.write(dev_type);
        i.write(dev_id);
        Ok(())
    })
}

/// The storage type code: 0 dense, 1 row_sparse, 2 csr; -1 for an empty array.
///
/// Ownership: `*out_storage_type` is written on success.
pub extern "C" fn MXNDArrayGetStorageType(handle: NDArrayHandle, out_storage_type: *mut c_int) -> c_int {
    ffi_boundary!({
        let out = Out::new(out_storage_type, "out_storage_type")?;
        out.write(property(handle, UNDEFINED_STORAGE, |a| a.stype() as c_int)?);
        Ok(())
    })
}

/// A raw pointer to the values (NULL for an empty array). Does not wait: call
/// `MXNDArrayWaitToRead` / `MXNDArrayWaitToWrite` first, as with MXNet.
///
/// Ownership: borrowed; valid while any view of the memory lives.
pub extern "C" fn MXNDArrayGetData(handle: NDArrayHandle, out_pdata: *mut *mut c_void) -> c_int {
    ffi_boundary!({
        let out = Out::new(out_pdata, "out_pdata")?;
        out.write(property(handle, std::ptr::null_mut(), |a| a.data_ptr() as *mut c_void)?);
        Ok(())
    })
}

/// A view of rows `[slice_begin, slice_end)` sharing memory with the array.
///
/// Ownership: the caller frees `*out` with `MXNDArrayFree`.
pub extern "C" fn MXNDArraySlice(handle: NDArrayHandle, slice_begin: u32, slice_end: u32, out: *mut NDArrayHandle) -> c_int {
    ffi_boundary!({
        let out = Out::new(out, "out")?;
        let view = handle::ndarray(handle, "handle")?.slice(slice_begin as usize, slice_end as usize)?;
        out.write(handle::new_ndarray(Some(view)));
        Ok(())
    })
}

/// A view of row `idx` (first dimension dropped) sharing memory with the array.
///
/// Ownership: the caller frees `*out` with `MXNDArrayFree`.
pub extern "C" fn MXNDArrayAt(handle: NDArrayHandle, idx: u32, out: *mut NDArrayHandle) -> c_int {
    ffi_boundary!({
        let out = Out::new(out, "out")?;
        let view = handle::ndarray(handle, "handle")?.at(idx as usize)?;
        out.write(handle::new_ndarray(Some(view)));
        Ok(())
    })
}

/// Resolves MXNet's reshape dims: 0 keeps the input's dimension, -1 is inferred (once).
/// `reverse` matches the special values from the right, as MXNet's `reverse=True`.
fn reshape_dims_from(input: &[usize], dims: &[i64], reverse: bool) -> Result<Vec<usize>> {
    if reverse {
        let rin: Vec<usize> = input.iter().rev().copied().collect();
        let rdims: Vec<i64> = dims.iter().rev().copied().collect();
        let mut shape = reshape_dims_from(&rin, &rdims, false)?;
        shape.reverse();
        return Ok(shape);
    }
    let dims: Vec<c_int> = dims
        .iter()
        .map(|&d| c_int::try_from(d).map_err(|_| crate::Error::new(format!("reshape dim {d} is too large"))))
        .collect::<Result<_>>()?;
    reshape_dims(input, &dims)
}

/// Resolves MXNet's reshape dims: 0 keeps the input's dimension, -1 is inferred (once).
fn reshape_dims(input: &[usize], dims: &[c_int]) -> Result<Vec<usize>> {
    let mut shape = Vec::with_capacity(dims.len());
    let mut infer = None;
    for (i, &d) in dims.iter().enumerate() {
        match d {
            -1 => {
                crate::ensure!(infer.is_none(), "reshape dims may infer (-1) only one dimension");
                infer = Some(i);
                shape.push(1);
            }
            0 => shape.push(*input.get(i).ok_or_else(|| crate::Error::new(format!("dim {i} is 0 but the input has no dim {i}")))?),
            d if d > 0 => shape.push(d as usize),
            d => crate::bail!("reshape dim {d} is not supported"),
        }
    }
    if let Some(i) = infer {
        let known: usize = shape.iter().product();
        let total: usize = input.iter().product();
        crate::ensure!(known > 0 && total.is_multiple_of(known), "cannot infer dim {i}: {total} elements do not divide by {known}");
        shape[i] = total / known;
    }
    Ok(shape)
}

/// A view with another shape of the same size (dims: 0 keeps, -1 infers).
///
/// Ownership: the caller frees `*out` with `MXNDArrayFree`.
pub extern "C" fn MXNDArrayReshape(handle: NDArrayHandle, ndim: c_int, dims: *mut c_int, out: *mut NDArrayHandle) -> c_int {
    ffi_boundary!({
        let out = Out::new(out, "out")?;
        let ndim = usize::try_from(ndim).map_err(|_| crate::Error::new(format!("ndim {ndim} is negative")))?;
        let array = handle::ndarray(handle, "handle")?;
        let shape = reshape_dims(array.shape(), args::slice(dims, ndim, "dims")?)?;
        out.write(handle::new_ndarray(Some(array.reshape(&shape)?)));
        Ok(())
    })
}

/// [`MXNDArrayReshape`] with 64-bit dims and MXNet's `reverse` flag (what Python's and
/// Perl's `reshape` call).
///
/// Ownership: the caller frees `*out` with `MXNDArrayFree`.
pub extern "C" fn MXNDArrayReshape64(handle: NDArrayHandle, ndim: c_int, dims: *mut i64, reverse: bool, out: *mut NDArrayHandle) -> c_int {
    ffi_boundary!({
        let out = Out::new(out, "out")?;
        let ndim = usize::try_from(ndim).map_err(|_| crate::Error::new(format!("ndim {ndim} is negative")))?;
        let array = handle::ndarray(handle, "handle")?;
        let shape = reshape_dims_from(array.shape(), args::slice(dims, ndim, "dims")?, reverse)?;
        out.write(handle::new_ndarray(Some(array.reshape(&shape)?)));
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reshape_dims_keep_and_infer_like_mxnet() {
        assert_eq!(reshape_dims(&[2, 3, 4], &[0, -1]).unwrap(), vec![2, 12]);
        assert_eq!(reshape_dims(&[2, 3, 4], &[4, 6]).unwrap(), vec![4, 6]);
        assert!(reshape_dims(&[2, 3], &[-1, -1]).is_err());
        assert!(reshape_dims(&[2, 3], &[4, -1]).is_err());
        assert_eq!(reshape_dims_from(&[2, 3, 4], &[-1, 0], true).unwrap(), vec![6, 4]);
        assert_eq!(reshape_dims_from(&[2, 3, 4], &[0, -1], false).unwrap(), vec![2, 12]);
    }
}
