//! The host backend's byte kernels: the host kernels of `reduce` and `compression`, as they are.

use crate::backend::{ByteKernels, GradientCompression, SumOrder};
use crate::base::buffer::Buffer;
use crate::base::DType;
use crate::error::Result;
use crate::reduce::{self, sparse};

/// The host's byte kernels.
pub(crate) struct HostBytes;

/// The host's byte kernels, every backend's for now.
pub(crate) static HOST_BYTES: HostBytes = HostBytes;

impl ByteKernels for HostBytes {
    fn sum(&self, dtype: DType, order: SumOrder, dst: &mut [u8], srcs: &[&[u8]], threads: usize) {
        reduce::sum_into(dtype, order, dst, srcs, threads)
    }

    fn add(&self, dtype: DType, dst: &mut [u8], src: &[u8]) {
        reduce::add_into(dtype, dst, src)
    }

    fn copy_cast(&self, from: DType, src: &[u8], to: DType, dst: &mut [u8], threads: usize) {
        reduce::copy_cast(from, src, to, dst, threads)
    }

    fn sum_rows(&self, dtype: DType, row_bytes: usize, inputs: &[(&[i64], &[u8])]) -> Result<(Vec<i64>, Buffer)> {
        sparse::sum_rows(dtype, row_bytes, inputs)
    }

    fn compress(&self, compression: &GradientCompression, grad: &[f32], residual: &mut [f32], packed: &mut [u8]) {
        compression.quantize(grad, residual, packed)
    }

    fn decompress(&self, compression: &GradientCompression, packed: &[u8], out: &mut [f32]) {
        compression.dequantize(packed, out)
    }
}

#[cfg(test)]
mod tests {
    use crate::backend::{BackendKind, CompressionType, GradientCompression, SumOrder};
    use crate::base::DType;

    /// The dist store's bytes are on the host whatever the backend: the GPU backend's byte
    /// kernels are the host's, and run without a device.
    #[test]
    fn every_backends_byte_kernels_run_on_host_bytes() {
        let gc = GradientCompression { kind: CompressionType::TwoBit, threshold: 0.5 };
        let results: Vec<_> = [BackendKind::Host, BackendKind::Gpu]
            .into_iter()
            .map(|kind| {
                let k = kind.backend().byte_kernels();
                let a: &[u8] = bytemuck::cast_slice(&[1.0f32, -0.75, 0.25]);
                let b: &[u8] = bytemuck::cast_slice(&[0.5f32, 0.5, 0.5]);
                let mut sum = vec![0u8; a.len()];
                k.sum(DType::Float32, SumOrder::Serial, &mut sum, &[a, b], 1);
                k.add(DType::Float32, &mut sum, b);
                let mut half = vec![0u8; 6];
                k.copy_cast(DType::Float32, &sum, DType::Float16, &mut half, 1);
                let (mut residual, mut packed) = (vec![0f32; 3], vec![0u8; gc.packed_bytes(3)]);
                k.compress(&gc, bytemuck::cast_slice(&sum), &mut residual, &mut packed);
                let mut sent = vec![0f32; 3];
                k.decompress(&gc, &packed, &mut sent);
                let (ids, rows) = k.sum_rows(DType::Float32, 4, &[(&[0, 2], &a[..8]), (&[2], &b[..4])]).unwrap();
                (bytemuck::cast_slice::<u8, f32>(&sum).to_vec(), half, sent, residual, ids, rows.bytes().to_vec())
            })
            .collect();
        let (sum, _, sent, residual, ids, rows) = &results[0];
        assert_eq!(sum, &[2.0, 0.25, 1.25]);
        assert_eq!((sent.as_slice(), residual.as_slice()), (&[0.5, 0.0, 0.5][..], &[1.5, 0.25, 0.75][..]));
        assert_eq!((ids.as_slice(), bytemuck::cast_slice::<u8, f32>(rows)), (&[0i64, 2][..], &[1.0f32, -0.25][..]));
        assert_eq!(results[0], results[1]);
    }
}
