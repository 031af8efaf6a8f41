//! The values ops compute on: dense host copies of their inputs, and results that are then
//! written into output arrays of any storage type.

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

    /// Writes the value into `dst` (dense: cast into its dtype; row_sparse: its non-zero
    /// rows). The caller has ordered the write with the engine.
    pub fn write_now(&self, dst: &NDArray) -> Result<()> {
        let tmp = NDArray::zeros(&self.value.shape, dst.ctx(), self.value.dtype)?;
        tmp.write_bytes(|b| b.copy_from_slice(self.value.data.bytes()));
        crate::backend::host::copy_any_now(&tmp, dst, crate::engine::engine().thread_budget())
    }
}
