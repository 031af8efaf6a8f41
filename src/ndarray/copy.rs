//! What array-to-array copies need from arrays: the check that a copy is possible, and a new
//! array to copy into. The copies themselves are a backend's (`backend::Backend::copy_any`).

use super::{shape_string, Context, NDArray, StorageType};
use crate::error::Result;

impl NDArray {
    /// Checks that `self` can be copied into `dst`: both dense, same shape (dtypes may differ;
    /// values are cast as MXNet's `CopyFromTo` does).
    pub fn check_copy_to(&self, dst: &NDArray) -> Result<()> {
        self.require_dense("copy")?;
        dst.require_dense("copy")?;
        crate::ensure!(
            self.shape() == dst.shape(),
            "shape mismatch: source {} vs destination {}",
            shape_string(self.shape()),
            shape_string(dst.shape())
        );
        Ok(())
    }

    /// A new array on `ctx` with this one's shape, dtype and storage type, holding zeros (or
    /// no rows), for a copy of it.
    pub fn empty_like(&self, ctx: Context) -> Result<NDArray> {
        match self.stype() {
            StorageType::Default => NDArray::zeros(self.shape(), ctx, self.dtype()),
            StorageType::RowSparse => NDArray::empty_row_sparse(self.shape(), ctx, self.dtype()),
            StorageType::Csr => crate::bail!("copying csr arrays is not supported"),
        }
    }

    /// Whether both are the same view: same memory, offset and dtype.
    pub fn same_view(&self, other: &NDArray) -> bool {
        self.same_chunk(other) && self.offset == other.offset && self.dtype == other.dtype
    }
}
