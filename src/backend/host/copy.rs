//! Array-to-array copies on the host: across dtypes (cast element-wise) and storage types (as
//! MXNet's `CopyFromTo` with `cast_storage`). The caller has ordered them with the engine.

use crate::base::buffer::Buffer;
use crate::base::cast;
use crate::error::Result;
use crate::ndarray::{NDArray, StorageType};
use crate::reduce::{copy_cast, sparse};

/// `dst = src` across storage types: a row_sparse source fills a dense destination with zeros
/// for absent rows; a dense source fills a row_sparse destination with its non-zero rows.
pub(crate) fn copy_any_now(src: &NDArray, dst: &NDArray, threads: usize) -> Result<()> {
    // The values in the destination's dtype, `rows` rows of them.
    let in_dst_dtype = |bytes: &[u8], rows: usize| -> Result<Buffer> {
        let mut out = Buffer::zeroed(rows * dst.row_bytes())?;
        if src.dtype() == dst.dtype() {
            out.bytes_mut().copy_from_slice(bytes);
        } else {
            cast(src.dtype(), bytes, dst.dtype(), out.bytes_mut());
        }
        Ok(out)
    };
    match (src.stype(), dst.stype()) {
        (StorageType::Default, StorageType::Default) => copy_dense_now(src, dst, threads),
        (StorageType::RowSparse, StorageType::Default) => {
            let rows = src.rows_now()?;
            let data = in_dst_dtype(&rows.data, rows.ids.len())?;
            dst.write_bytes(|d| sparse::densify(dst.row_bytes(), &rows.ids, data.bytes(), d));
            Ok(())
        }
        (StorageType::Default, StorageType::RowSparse) => {
            let rows = src.shape().first().copied().unwrap_or(1);
            let dense = src.read_bytes(|b| in_dst_dtype(b, rows))?;
            let (ids, data) = sparse::sparsify(dst.row_bytes(), dense.bytes())?;
            dst.set_rows_now(&ids, data)
        }
        (StorageType::RowSparse, StorageType::RowSparse) if !src.same_chunk(dst) => {
            let rows = src.rows_now()?;
            let data = in_dst_dtype(&rows.data, rows.ids.len())?;
            dst.set_rows_now(&rows.ids, data)
        }
        // csr is refused when the copy is checked; a row_sparse array onto itself is a no-op.
        _ => Ok(()),
    }
}

/// `dst = src`, both dense and of one shape, casting between dtypes.
pub(crate) fn copy_dense_now(src: &NDArray, dst: &NDArray, threads: usize) -> Result<()> {
    if src.same_chunk(dst) {
        if src.same_view(dst) {
            return Ok(());
        }
        // Overlapping views of one chunk: go through a temporary.
        let mut tmp = Buffer::zeroed(src.data_byte_len())?;
        src.read_bytes(|s| tmp.bytes_mut().copy_from_slice(s));
        dst.write_bytes(|d| copy_cast(src.dtype(), tmp.bytes(), dst.dtype(), d, threads));
        return Ok(());
    }
    src.read_bytes(|s| dst.write_bytes(|d| copy_cast(src.dtype(), s, dst.dtype(), d, threads)));
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::backend::{for_context, BackendKind};
    use crate::ndarray::{Context, DType, NDArray};

    #[test]
    fn scheduled_copies_cast_and_sync_reads_wait_for_them() {
        let host = BackendKind::Host.backend();
        let a = NDArray::zeros(&[3], Context::cpu(0), DType::Float32).unwrap();
        a.copy_from_host(bytemuck::cast_slice(&[1.5f32, 2.5, -3.5])).unwrap();
        let b = NDArray::zeros(&[3], Context::cpu(1), DType::Int64).unwrap();
        a.check_copy_to(&b).unwrap();
        host.copy_any(&a, &b, 0);
        let mut out = [0i64; 3];
        b.copy_to_host(bytemuck::cast_slice_mut(&mut out)).unwrap();
        assert_eq!(out, [1, 2, -3]);
        let c = a.empty_like(Context::cpu_pinned(0)).unwrap();
        for_context(c.ctx()).copy_any(&a, &c, 0);
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
        let host = BackendKind::Host.backend();
        host.copy_sync(&a.slice(0, 2).unwrap(), &a.slice(2, 4).unwrap()).unwrap();
        let mut out = [0f32; 4];
        a.copy_to_host(bytemuck::cast_slice_mut(&mut out)).unwrap();
        assert_eq!(out, [1., 2., 1., 2.]);
    }
}
