//! Reading and replacing the rows of a row_sparse array, for the store's kernels. Callers
//! order these with the engine first (they run inside ops or `run_sync`).

use crate::base::buffer::{typed, Buffer};
use super::{AuxData, DType, Memory, NDArray, StorageType};
use crate::error::Result;
use crate::base::cast;

/// A row_sparse value read out: its row ids and the bytes of those rows.
pub struct Rows {
    /// Row ids, as stored (MXNet expects them sorted and unique).
    pub ids: Vec<i64>,
    /// The rows' values, `row_bytes` each.
    pub data: Vec<u8>,
}

/// Where a GPU row_sparse array's parts are in its GPU's memory, for driver copies. The
/// memory stays where it is while the engine keeps writes to the array away.
#[derive(Debug, Clone, Copy)]
pub struct DeviceRows {
    /// The row ids.
    pub ids: crate::gpu::DevicePtr,
    /// Their dtype.
    pub id_dtype: DType,
    /// How many rows are stored.
    pub rows: usize,
    /// The rows' values, `rows × row_bytes` bytes.
    pub values: crate::gpu::DevicePtr,
}

impl NDArray {
    /// The parts of a row_sparse array held in a GPU's memory; `None` for other arrays. An
    /// array whose ids and values disagree (filled separately, see
    /// [`NDArray::check_row_sparse_parts`]) shows no rows, as [`NDArray::rows_now`] reads it.
    pub(crate) fn device_rows(&self) -> Option<DeviceRows> {
        if self.stype() != StorageType::RowSparse {
            return None;
        }
        let consistent = self.check_row_sparse_parts().is_ok();
        let payload = self.chunk.payload.read_recursive();
        let aux = payload.aux.first()?;
        let (ids, values) = (aux.data.device_ptr()?, payload.data.device_ptr()?);
        let rows = if consistent { aux.shape.first().copied().unwrap_or(0) } else { 0 };
        Some(DeviceRows { ids, id_dtype: aux.dtype, rows, values })
    }

    /// The dtype of a row_sparse array's row ids (int64 unless created otherwise).
    pub(crate) fn row_id_dtype(&self) -> DType {
        self.chunk.payload.read_recursive().aux.first().map_or(DType::Int64, |a| a.dtype)
    }

    /// Replaces the rows of a row_sparse array with `rows` rows already in place: ids of
    /// `id_dtype` in `ids`, values in `values` (on the array's GPU for a GPU array).
    pub(crate) fn install_rows(&self, id_dtype: DType, rows: usize, ids: Memory, values: Memory) {
        let mut storage_shape = self.shape().to_vec();
        if let Some(first) = storage_shape.first_mut() {
            *first = rows;
        }
        let mut payload = self.chunk.payload.write();
        payload.aux = vec![AuxData { dtype: id_dtype, shape: vec![rows], data: ids }];
        payload.data = values;
        payload.storage_shape = storage_shape;
    }

    /// Elements in one row (the product of all dimensions but the first).
    pub fn row_len(&self) -> usize {
        self.shape().iter().skip(1).product()
    }

    /// Bytes in one row.
    pub fn row_bytes(&self) -> usize {
        self.row_len() * self.dtype().size()
    }

    /// The row ids of a row_sparse array as stored, unchecked (downloaded, and waited for,
    /// from a GPU array's memory).
    pub(crate) fn raw_row_ids(&self) -> Result<Vec<i64>> {
        let payload = self.chunk.payload.read_recursive();
        let Some(aux) = payload.aux.first() else { return Ok(Vec::new()) };
        let n = aux.shape.first().copied().unwrap_or(0);
        match &aux.data {
            Memory::Device(_) => super::row_ids::ids_of(aux.dtype, aux.data.to_host()?.bytes(), n),
            host if aux.dtype == DType::Int64 => crate::base::buffer::try_copy(typed::<i64>(host.bytes())),
            host => super::row_ids::ids_of(aux.dtype, host.bytes(), n),
        }
    }

    /// The ids and values of a row_sparse array, for the kernels. Arrays are checked where
    /// they enter the store and the operators, so a malformed one (ids and values that
    /// disagree, or ids unsorted, repeated or out of range) gets here only when another
    /// thread refills it while a call that checked it is in flight; it reads as no rows
    /// rather than make a kernel index out of bounds or two reads of one row disagree.
    pub(crate) fn rows_now(&self) -> Result<Rows> {
        let ids = self.raw_row_ids()?;
        let rows = self.shape().first().copied().unwrap_or(0);
        if self.check_row_sparse_parts().is_err() || super::row_ids::check_row_ids(&ids, rows).is_err() {
            return Ok(Rows { ids: Vec::new(), data: Vec::new() });
        }
        let payload = self.chunk.payload.read_recursive();
        let data = match &payload.data {
            Memory::Device(d) => {
                let mut data = crate::base::buffer::try_filled(d.len(), 0u8)?;
                crate::gpu::transfer::download(&mut data, d.ptr()).map_err(crate::Error::new)?;
                data
            }
            host => crate::base::buffer::try_copy(host.bytes())?,
        };
        Ok(Rows { ids, data })
    }

    /// Replaces the rows of a row_sparse array (`data` holds `ids.len()` rows); a GPU array's
    /// ids and values are uploaded into new device memory (and waited for) before anything
    /// is replaced, so a failed upload leaves the array as it was.
    pub(crate) fn set_rows_now(&self, ids: &[i64], data: Buffer) -> Result<()> {
        debug_assert_eq!(self.stype(), StorageType::RowSparse);
        let aux_dtype = self.row_id_dtype();
        let mut aux = Buffer::zeroed(ids.len() * aux_dtype.size())?;
        cast(DType::Int64, bytemuck::cast_slice(ids), aux_dtype, aux.bytes_mut());
        let aux = Memory::holding_sparse(self.ctx(), aux)?;
        let data = Memory::holding_sparse(self.ctx(), data)?;
        self.install_rows(aux_dtype, ids.len(), aux, data);
        Ok(())
    }

    /// Fails unless a row_sparse array has as many row ids as rows of values (the caller
    /// fills the two parts separately, so they can disagree).
    pub fn check_row_sparse_parts(&self) -> Result<()> {
        if self.stype() != StorageType::RowSparse {
            return Ok(());
        }
        let payload = self.chunk.payload.read_recursive();
        let ids = payload.aux.first().and_then(|a| a.shape.first().copied()).unwrap_or(0);
        let rows = payload.storage_shape.first().copied().unwrap_or(0);
        crate::ensure!(
            ids == rows && payload.storage_shape.get(1..) == self.shape().get(1..),
            "inconsistent row_sparse array: {ids} row ids for {rows} rows of values",
        );
        Ok(())
    }

    /// An empty row_sparse array (no stored rows) of this shape and dtype on `ctx`.
    pub fn empty_row_sparse(shape: &[usize], ctx: super::Context, dtype: DType) -> Result<NDArray> {
        NDArray::sparse(StorageType::RowSparse, shape, ctx, dtype, &[(DType::Int64, vec![0])])
    }
}
