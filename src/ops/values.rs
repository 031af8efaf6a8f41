//! The values ops compute on: dense host copies of their inputs, and results that are then
//! written into output arrays of any storage type. GPU arrays are read and written through
//! pinned staging (the operators compute on the host; `docs/gpu.md`).

use crate::error::Result;
use crate::base::buffer::Buffer;
use crate::ndarray::{shape_string, Context, DType, NDArray, StorageType};
use crate::reduce::sparse::densify;

/// A dense value: shape, dtype and 8-byte-aligned bytes.
#[derive(Debug)]
pub struct Dense {
    /// Logical shape.
    pub shape: Vec<usize>,
    /// Element type.
    pub dtype: DType,
    /// `size × dtype.size()` bytes.
    pub data: Buffer,
}

impl Dense {
    /// A zero-filled value.
    pub fn zeros(shape: &[usize], dtype: DType) -> Result<Dense> {
        let size = crate::ndarray::checked_size(shape)?;
        Ok(Dense { shape: shape.to_vec(), dtype, data: Buffer::zeroed(size * dtype.size())? })
    }

    /// Number of elements.
    pub fn size(&self) -> usize {
        self.shape.iter().product()
    }

    /// A dense copy of `array` (row_sparse: absent rows are zeros). The caller has ordered
    /// the read with the engine.
    pub fn read_now(array: &NDArray) -> Result<Dense> {
        let mut value = Dense::zeros(array.shape(), array.dtype())?;
        if let Some(src) = array.device_ptr() {
            crate::gpu::transfer::download(value.data.bytes_mut(), src).map_err(crate::Error::new)?;
            return Ok(value);
        }
        match array.stype() {
            StorageType::Default => array.read_bytes(|b| value.data.bytes_mut().copy_from_slice(b)),
            StorageType::RowSparse => {
                let rows = array.rows_checked()?;
                densify(array.row_bytes(), &rows.ids, &rows.data, value.data.bytes_mut());
            }
            StorageType::Csr => crate::bail!("csr inputs are not supported by libkvstore's operators"),
        }
        Ok(value)
    }
}

/// What an op produces for one output: the value and, for a newly allocated output, the
/// storage type it gets.
#[derive(Debug)]
pub struct Output {
    /// The computed value.
    pub value: Dense,
    /// Storage type of a newly allocated output array.
    pub stype: StorageType,
}

impl Output {
    /// A dense output.
    pub fn dense(value: Dense) -> Output {
        Output { value, stype: StorageType::Default }
    }

    /// A new array on `ctx` for this output (its values are written separately).
    pub fn allocate(&self, ctx: Context) -> Result<NDArray> {
        match self.stype {
            StorageType::Default => NDArray::zeros(&self.value.shape, ctx, self.value.dtype),
            StorageType::RowSparse => NDArray::empty_row_sparse(&self.value.shape, ctx, self.value.dtype),
            StorageType::Csr => crate::bail!("csr outputs are not supported by libkvstore's operators"),
        }
    }

    /// Checks that `dst` can receive this output: same shape (dtypes may differ: values are cast).
    pub fn check_target(&self, dst: &NDArray, op: &str) -> Result<()> {
        crate::ensure!(
            dst.shape() == self.value.shape.as_slice(),
            "operator {op}: the output array has shape {}, the result has shape {}",
            shape_string(dst.shape()),
            shape_string(&self.value.shape)
        );
        crate::ensure!(dst.stype() != StorageType::Csr, "operator {op}: csr outputs are not supported by libkvstore");
        Ok(())
    }

    /// The one element every position holds, in `dtype`'s bytes, if the value is a constant of
    /// that dtype (a fill).
    fn constant_element(&self, dtype: DType) -> Option<Vec<u8>> {
        let v = &self.value;
        let esz = dtype.size();
        if v.dtype != dtype || v.size() == 0 {
            return None;
        }
        let bytes = v.data.bytes();
        let first = &bytes[..esz];
        bytes.chunks_exact(esz).all(|e| e == first).then(|| first.to_vec())
    }

    /// Writes the value into `dst` (dense: cast into its dtype; row_sparse: its non-zero
    /// rows). The caller has ordered the write with the engine.
    pub fn write_now(&self, dst: &NDArray) -> Result<()> {
        let host_ctx = if dst.ctx().dev_type == crate::ndarray::DeviceType::Gpu { Context::cpu(0) } else { dst.ctx() };
        let tmp = NDArray::zeros(&self.value.shape, host_ctx, self.value.dtype)?;
        tmp.write_bytes(|b| b.copy_from_slice(self.value.data.bytes()));
        let threads = crate::engine::engine().thread_budget();
        let Some(device) = dst.device_ptr() else { return crate::backend::host::copy_any_now(&tmp, dst, threads) };
        if let Some(element) = self.constant_element(dst.dtype()) {
            // `_zeros`, `_ones`, `_full`, `_set_value`: filled on the GPU, nothing uploaded.
            return crate::gpu::transfer::fill(device, dst.dtype(), &element, dst.size() as u64).map_err(crate::Error::new);
        }
        // A GPU output: cast on the host into its dtype, then one upload.
        let cast = NDArray::zeros(&self.value.shape, host_ctx, dst.dtype())?;
        crate::backend::host::copy_any_now(&tmp, &cast, threads)?;
        cast.read_bytes(|b| crate::gpu::transfer::upload(device, b)).map_err(crate::Error::new)
    }
}
