//! Validation of row_sparse row ids. A row_sparse value's ids must be sorted, unique and
//! within `[0, rows)`: the kernels binary-search them, so an unsorted or repeated id would
//! make two reads of the same row disagree, and an id out of range names no row. Ids enter
//! through `MXNDArraySyncCopyFromNDArray(arr, ids, 0)` (checked there) and through creation
//! (zeros, so repeated when more than one row is declared, until filled); the values and the
//! ids are filled separately, so whether they agree is checked where an array is used: by
//! the store (init, push) and by the operators.

use super::{DType, NDArray, StorageType};
use crate::engine::engine;
use crate::error::Result;

/// Fails unless `ids` are strictly increasing and within `[0, rows)`.
pub(crate) fn check_row_ids(ids: &[i64], rows: usize) -> Result<()> {
    let mut previous: Option<i64> = None;
    for (at, &id) in ids.iter().enumerate() {
        crate::ensure!(
            usize::try_from(id).is_ok_and(|r| r < rows),
            "row id {id} (position {at}) is out of range: the array has {rows} rows"
        );
        if let Some(p) = previous {
            crate::ensure!(
                id > p,
                "row ids must be sorted and unique: {id} (position {at}) follows {p}"
            );
        }
        previous = Some(id);
    }
    Ok(())
}

/// `values` (dense, of any integer or float dtype) as int64 ids, C-cast.
pub(crate) fn ids_of(dtype: DType, bytes: &[u8], n: usize) -> Result<Vec<i64>> {
    let mut ids = crate::base::buffer::try_filled(n, 0i64)?;
    crate::base::cast(dtype, bytes, DType::Int64, bytemuck::cast_slice_mut(&mut ids));
    Ok(ids)
}

impl NDArray {
    /// Fails unless a row_sparse array is well formed: as many row ids as rows of values,
    /// the ids sorted, unique and in range (dense arrays pass). Waits for pending writes to
    /// the array first.
    pub fn check_row_sparse(&self) -> Result<()> {
        if self.stype() != StorageType::RowSparse {
            return Ok(());
        }
        engine().run_sync(&[self.var()], &[], || self.check_row_sparse_now())?
    }

    /// [`NDArray::check_row_sparse`] without waiting: the caller has ordered the read.
    pub(crate) fn check_row_sparse_now(&self) -> Result<()> {
        self.check_row_sparse_parts()?;
        let rows = self.shape().first().copied().unwrap_or(0);
        check_row_ids(&self.raw_row_ids()?, rows).map_err(|e| crate::Error::new(format!("invalid row_sparse array: {e}")))
    }

    /// The rows of a row_sparse array, checked (see [`NDArray::check_row_sparse`]): what an
    /// operator reads. The caller has ordered the read.
    pub(crate) fn rows_checked(&self) -> Result<super::Rows> {
        self.check_row_sparse_now()?;
        self.rows_now()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_ids_must_be_sorted_unique_and_in_range() {
        assert!(check_row_ids(&[], 0).is_ok());
        assert!(check_row_ids(&[0, 2, 5], 6).is_ok());
        let msg = |ids: &[i64]| check_row_ids(ids, 6).unwrap_err().message().to_string();
        assert!(msg(&[2, 1]).contains("sorted and unique: 1 (position 1) follows 2"));
        assert!(msg(&[1, 1]).contains("sorted and unique"));
        assert!(msg(&[1, 6]).contains("row id 6 (position 1) is out of range: the array has 6 rows"));
        assert!(msg(&[-1]).contains("row id -1"));
    }
}
