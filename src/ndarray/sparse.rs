//! Sparse arrays (row_sparse, csr): creation and the parts MXNet's C API reads and fills.
//! The store's sparse operations build on these.

use crate::base::buffer::Buffer;
use super::{checked_size, shape_string, AuxData, Context, DType, Memory, NDArray, Payload, StorageType};
use crate::engine::engine;
use crate::error::Result;
use crate::base::cast;

/// Shape of the stored values of a sparse array, given its shape and aux shapes.
fn storage_shape_of(stype: StorageType, shape: &[usize], aux: &[(DType, Vec<usize>)]) -> Vec<usize> {
    let first = |i: usize| aux.get(i).and_then(|(_, s)| s.first().copied()).unwrap_or(0);
    match stype {
        StorageType::Default => shape.to_vec(),
        StorageType::RowSparse => std::iter::once(first(0)).chain(shape.iter().skip(1).copied()).collect(),
        StorageType::Csr => vec![first(1)],
    }
}

/// A new dense array on `ctx` holding a copy of `memory` (a sparse array's values or aux
/// array): copied within the GPU for device memory, else from the host bytes.
fn dense_copy_of(memory: &Memory, shape: &[usize], ctx: Context, dtype: DType) -> Result<NDArray> {
    let Memory::Device(d) = memory else { return NDArray::with_bytes(shape, ctx, dtype, memory.bytes()) };
    let out = NDArray::zeros(shape, ctx, dtype)?;
    match out.device_ptr() {
        Some(dst) => crate::gpu::transfer::copy_device(dst, d.ptr(), d.len()).map_err(crate::Error::new)?,
        None => out.write_bytes(|b| crate::gpu::transfer::download(b, d.ptr())).map_err(crate::Error::new)?,
    }
    Ok(out)
}

impl NDArray {
    /// A sparse array; `aux` gives each aux array's dtype and shape (MXNet's
    /// `MXNDArrayCreateSparseEx`).
    pub fn sparse(
        stype: StorageType,
        shape: &[usize],
        ctx: Context,
        dtype: DType,
        aux: &[(DType, Vec<usize>)],
    ) -> Result<NDArray> {
        crate::ensure!(stype != StorageType::Default, "a sparse array needs a sparse storage type");
        crate::ensure!(
            aux.len() == stype.num_aux(),
            "{} arrays have {} aux arrays, {} given",
            stype.name(),
            stype.num_aux(),
            aux.len()
        );
        let want_dims = if stype == StorageType::Csr { 2 } else { 1 };
        crate::ensure!(
            shape.len() >= want_dims && (stype != StorageType::Csr || shape.len() == 2),
            "shape {} does not suit {} storage",
            shape_string(shape),
            stype.name()
        );
        checked_size(shape)?;
        let mut aux_data = Vec::with_capacity(aux.len());
        for (i, (adt, ashape)) in aux.iter().enumerate() {
            crate::ensure!(adt.is_integer() && *adt != DType::Bool, "aux {i} must have an integer dtype, not {}", adt.name());
            crate::ensure!(ashape.len() == 1, "aux {i} must be 1-D, shape {} given", shape_string(ashape));
            let len = checked_size(ashape)? * adt.size();
            aux_data.push(AuxData { dtype: *adt, shape: ashape.clone(), data: Memory::zeroed_sparse(ctx, len)? });
        }
        let storage_shape = storage_shape_of(stype, shape, aux);
        let data = Memory::zeroed_sparse(ctx, checked_size(&storage_shape)? * dtype.size())?;
        let payload = Payload { data, storage_shape, aux: aux_data };
        Ok(NDArray::from_payload(payload, shape, ctx, dtype, stype))
    }

    /// Shape of the stored values (the array's shape when dense).
    pub fn storage_shape(&self) -> Vec<usize> {
        match self.stype() {
            StorageType::Default => self.shape().to_vec(),
            _ => self.chunk.payload.read_recursive().storage_shape.clone(),
        }
    }

    fn check_aux_index(&self, i: usize) -> Result<()> {
        crate::ensure!(
            i < self.stype().num_aux(),
            "aux index {i} is out of range: {} arrays have {} aux arrays",
            self.stype().name(),
            self.stype().num_aux()
        );
        Ok(())
    }

    /// Dtype of aux array `i`.
    pub fn aux_dtype(&self, i: usize) -> Result<DType> {
        self.check_aux_index(i)?;
        Ok(self.chunk.payload.read_recursive().aux[i].dtype)
    }

    /// A dense copy of aux array `i` on the array's context (a GPU array's: copied on the
    /// GPU), after pending writes, as MXNet's `aux_ndarray`.
    pub fn aux_ndarray(&self, i: usize) -> Result<NDArray> {
        self.check_aux_index(i)?;
        engine().run_sync(&[self.var()], &[], || {
            let payload = self.chunk.payload.read_recursive();
            let aux = &payload.aux[i];
            dense_copy_of(&aux.data, &aux.shape, self.ctx(), aux.dtype)
        })?
    }

    /// A dense copy of the stored values on the array's context, after pending writes, as
    /// MXNet's `data_ndarray`.
    pub fn data_ndarray(&self) -> Result<NDArray> {
        engine().run_sync(&[self.var()], &[], || {
            let payload = self.chunk.payload.read_recursive();
            dense_copy_of(&payload.data, &payload.storage_shape, self.ctx(), self.dtype())
        })?
    }

    /// Sets the stored values of a sparse array from a dense one, taking its rows as the new
    /// storage shape (MXNet's `SyncCopyFromNDArray` with `i = -1`).
    pub fn set_sparse_data_from(&self, src: &NDArray) -> Result<()> {
        src.require_dense("a sparse array's values")?;
        let src = &src.readable_on_host()?;
        crate::ensure!(!self.same_chunk(src), "source and destination are the same array");
        if self.stype() == StorageType::RowSparse {
            crate::ensure!(
                src.shape().len() == self.shape().len() && src.shape()[1..] == self.shape()[1..],
                "row_sparse values of shape {} do not fit an array of shape {}",
                shape_string(src.shape()),
                shape_string(self.shape())
            );
        }
        engine().run_sync(&[src.var()], &[self.var()], || {
            let mut data = Buffer::zeroed(src.size() * self.dtype().size())?;
            src.read_bytes(|s| cast(src.dtype(), s, self.dtype(), data.bytes_mut()));
            let data = Memory::holding_sparse(self.ctx(), data)?;
            let mut payload = self.chunk.payload.write();
            payload.data = data;
            payload.storage_shape = src.shape().to_vec();
            Ok(())
        })?
    }

    /// Sets aux array `i` from a dense 1-D array (MXNet's `SyncCopyFromNDArray` with `i >= 0`).
    pub fn set_aux_from(&self, i: usize, src: &NDArray) -> Result<()> {
        self.check_aux_index(i)?;
        src.require_dense("an aux array")?;
        let src = &src.readable_on_host()?;
        crate::ensure!(src.shape().len() == 1, "aux arrays are 1-D, shape {} given", shape_string(src.shape()));
        crate::ensure!(!self.same_chunk(src), "source and destination are the same array");
        engine().run_sync(&[src.var()], &[self.var()], || {
            let mut payload = self.chunk.payload.write();
            let dtype = payload.aux[i].dtype;
            let mut data = Buffer::zeroed(src.size() * dtype.size())?;
            src.read_bytes(|s| cast(src.dtype(), s, dtype, data.bytes_mut()));
            if self.stype() == StorageType::RowSparse {
                // Row ids enter here: refused unless sorted, unique and in range.
                let ids = super::row_ids::ids_of(dtype, data.bytes(), src.size())?;
                super::row_ids::check_row_ids(&ids, self.shape().first().copied().unwrap_or(0))?;
            }
            let data = Memory::holding_sparse(self.ctx(), data)?;
            payload.aux[i] = AuxData { dtype, shape: src.shape().to_vec(), data };
            Ok(())
        })?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_sparse_arrays_are_built_and_read_back_as_mxnet_does() {
        let rsp = NDArray::sparse(StorageType::RowSparse, &[5, 2], Context::cpu(0), DType::Float32, &[(DType::Int64, vec![0])])
            .unwrap();
        assert_eq!(rsp.storage_shape(), vec![0, 2]);
        let values = NDArray::zeros(&[2, 2], Context::cpu(0), DType::Float32).unwrap();
        values.copy_from_host(bytemuck::cast_slice(&[1f32, 2., 3., 4.])).unwrap();
        let idx = NDArray::zeros(&[2], Context::cpu(0), DType::Int64).unwrap();
        idx.copy_from_host(bytemuck::cast_slice(&[1i64, 3])).unwrap();
        rsp.set_sparse_data_from(&values).unwrap();
        rsp.set_aux_from(0, &idx).unwrap();
        assert_eq!(rsp.storage_shape(), vec![2, 2]);
        assert_eq!(rsp.aux_dtype(0).unwrap(), DType::Int64);
        let back = rsp.aux_ndarray(0).unwrap();
        let mut ids = [0i64; 2];
        back.copy_to_host(bytemuck::cast_slice_mut(&mut ids)).unwrap();
        assert_eq!(ids, [1, 3]);
        let data = rsp.data_ndarray().unwrap();
        assert_eq!(data.shape(), &[2, 2]);
        assert!(rsp.aux_dtype(1).is_err());
        let wrong = NDArray::zeros(&[2, 3], Context::cpu(0), DType::Float32).unwrap();
        assert!(rsp.set_sparse_data_from(&wrong).is_err());
    }
}
