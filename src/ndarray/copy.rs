//! Array-to-array copies: scheduled on the engine (store traffic) or synchronous
//! (`MXNDArraySyncCopyFromNDArray`).

use super::{shape_string, NDArray, StorageType};
use crate::engine::engine;
use crate::error::Result;
use crate::reduce::copy_cast;

/// A buffer holding `bytes`.
fn buffer_from(bytes: &[u8]) -> Result<crate::base::buffer::Buffer> {
    let mut buf = crate::base::buffer::Buffer::zeroed(bytes.len())?;
    buf.bytes_mut().copy_from_slice(bytes);
    Ok(buf)
}

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

    /// Schedules `dst = self` (same shape; dense or row_sparse, checked by the caller) and
    /// returns at once.
    pub fn schedule_copy_to(&self, dst: &NDArray, priority: i32) {
        let (src, out) = (self.clone(), dst.clone());
        engine().push(&[self.var()], &[dst.var()], priority, Box::new(move || src.copy_any_now(&out)));
    }

    /// `dst = self` across storage types, as MXNet's CopyFromTo with cast_storage: a row_sparse
    /// source fills a dense destination with zeros for absent rows; a dense source fills a
    /// row_sparse destination with its non-zero rows. The caller has ordered it.
    pub(crate) fn copy_any_now(&self, dst: &NDArray) {
        use crate::reduce::sparse;
        let cast = |bytes: Vec<u8>, rows: usize| -> Vec<u8> {
            if self.dtype() == dst.dtype() {
                return bytes;
            }
            let mut out = vec![0u8; rows * dst.row_bytes()];
            copy_cast(self.dtype(), &bytes, dst.dtype(), &mut out);
            out
        };
        match (self.stype(), dst.stype()) {
            (StorageType::Default, StorageType::Default) => self.copy_into_now(dst),
            (StorageType::RowSparse, StorageType::Default) => {
                let rows = self.rows_now();
                let data = cast(rows.data, rows.ids.len());
                dst.write_bytes(|d| sparse::densify(dst.row_bytes(), &rows.ids, &data, d));
            }
            (StorageType::Default, StorageType::RowSparse) => {
                let dense = cast(self.read_bytes(|b| b.to_vec()), self.shape().first().copied().unwrap_or(1));
                let (ids, data) = sparse::sparsify(dst.row_bytes(), &dense);
                if let Ok(buf) = buffer_from(&data) {
                    let _ = dst.set_rows_now(&ids, buf);
                }
            }
            (StorageType::RowSparse, StorageType::RowSparse) if !self.same_chunk(dst) => {
                let rows = self.rows_now();
                let data = cast(rows.data, rows.ids.len());
                if let Ok(buf) = buffer_from(&data) {
                    let _ = dst.set_rows_now(&rows.ids, buf);
                }
            }
            // csr is refused when the copy is checked; a row_sparse array onto itself is a no-op.
            _ => {}
        }
    }

    /// Schedules `dst = self` for every `dst` (each checked) as one op, and returns at once:
    /// one op per pulled key keeps the engine's per-call cost low for many small keys.
    pub fn schedule_copy_to_many(&self, dsts: Vec<NDArray>, priority: i32) {
        let writes: Vec<&crate::engine::Var> = dsts.iter().map(|d| d.var()).collect();
        let src = self.clone();
        let dsts_c = dsts.clone();
        engine().push(&[self.var()], &writes, priority, Box::new(move || {
            for d in &dsts_c {
                src.copy_into_now(d);
            }
        }));
    }

    /// `dst = self` on the calling thread, once pending ops allow.
    pub fn copy_to_sync(&self, dst: &NDArray) -> Result<()> {
        self.check_copy_to(dst)?;
        engine().run_sync(&[self.var()], &[dst.var()], || self.copy_into_now(dst));
        Ok(())
    }

    /// The copy itself; the caller has ordered it with the engine.
    pub(crate) fn copy_into_now(&self, dst: &NDArray) {
        if self.same_chunk(dst) {
            if self.offset == dst.offset && self.dtype == dst.dtype {
                return;
            }
            // Overlapping views of one chunk: go through a temporary.
            let tmp = self.read_bytes(|s| s.to_vec());
            dst.write_bytes(|d| copy_cast(self.dtype, &tmp, dst.dtype, d));
            return;
        }
        self.read_bytes(|s| dst.write_bytes(|d| copy_cast(self.dtype, s, dst.dtype, d)));
    }

    /// A new array on `ctx` with this one's storage type holding a copy of it, scheduled on
    /// the engine.
    pub fn deep_copy(&self, ctx: super::Context, priority: i32) -> Result<NDArray> {
        let copy = match self.stype() {
            StorageType::Default => NDArray::zeros(self.shape(), ctx, self.dtype())?,
            StorageType::RowSparse => NDArray::empty_row_sparse(self.shape(), ctx, self.dtype())?,
            StorageType::Csr => crate::bail!("copying csr arrays is not supported"),
        };
        self.schedule_copy_to(&copy, priority);
        Ok(copy)
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Context, DType};
    use super::*;

    #[test]
    fn scheduled_copies_cast_and_sync_reads_wait_for_them() {
        let a = NDArray::zeros(&[3], Context::cpu(0), DType::Float32).unwrap();
        a.copy_from_host(bytemuck::cast_slice(&[1.5f32, 2.5, -3.5])).unwrap();
        let b = NDArray::zeros(&[3], Context::cpu(1), DType::Int64).unwrap();
        a.check_copy_to(&b).unwrap();
        a.schedule_copy_to(&b, 0);
        let mut out = [0i64; 3];
        b.copy_to_host(bytemuck::cast_slice_mut(&mut out)).unwrap();
        assert_eq!(out, [1, 2, -3]);
        let c = a.deep_copy(Context::cpu_pinned(0), 0).unwrap();
        a.copy_from_host(bytemuck::cast_slice(&[0f32; 3])).unwrap();
        let mut kept = [0f32; 3];
        c.copy_to_host(bytemuck::cast_slice_mut(&mut kept)).unwrap();
        assert_eq!(kept, [1.5, 2.5, -3.5]);
        let wrong = NDArray::zeros(&[4], Context::cpu(0), DType::Float32).unwrap();
        assert!(a.check_copy_to(&wrong).is_err());
    }

    #[test]
    fn a_copy_between_overlapping_views_goes_through_a_temporary() {
        let a = NDArray::zeros(&[4], Context::cpu(0), DType::Float32).unwrap();
        a.copy_from_host(bytemuck::cast_slice(&[1f32, 2., 3., 4.])).unwrap();
        a.slice(0, 2).unwrap().copy_to_sync(&a.slice(2, 4).unwrap()).unwrap();
        let mut out = [0f32; 4];
        a.copy_to_host(bytemuck::cast_slice_mut(&mut out)).unwrap();
        assert_eq!(out, [1., 2., 1., 2.]);
    }
}
