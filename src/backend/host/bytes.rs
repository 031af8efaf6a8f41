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
