//! Kernels over byte buffers in host memory, run on the calling thread: what a distributed
//! store does to the bytes it sends and receives (a worker sums a key's values and compresses
//! them before sending; a server decompresses, casts and sums what arrives). The store reaches
//! them through its context's backend ([`Backend::byte_kernels`](super::Backend::byte_kernels)),
//! as it reaches every kernel, so that no store module picks a kernel itself.
//!
//! Each kernel checks nothing: lengths agree with the dtypes and counts, as the caller has made
//! sure.

use super::{GradientCompression, SumOrder};
use crate::base::buffer::Buffer;
use crate::base::DType;
use crate::error::Result;

/// Synchronous kernels over host bytes. Results are bit for bit those of the ops the backends
/// schedule on arrays (the same association orders and casts).
pub trait ByteKernels: Sync {
    /// `dst = Σ srcs` element-wise (values of `dtype`, each as long as `dst`), associated as
    /// `order` says, on up to `threads` threads.
    fn sum(&self, dtype: DType, order: SumOrder, dst: &mut [u8], srcs: &[&[u8]], threads: usize);

    /// `dst += src` element-wise (values of `dtype`): a server's running sum of a round.
    fn add(&self, dtype: DType, dst: &mut [u8], src: &[u8]);

    /// `dst = src` element-wise, cast from `from` to `to` where they differ, on up to
    /// `threads` threads.
    fn copy_cast(&self, from: DType, src: &[u8], to: DType, dst: &mut [u8], threads: usize);

    /// The sum of row sets (each sorted unique row ids and their rows of `row_bytes` bytes,
    /// values of `dtype`) over the union of their rows: that union and its rows.
    fn sum_rows(&self, dtype: DType, row_bytes: usize, inputs: &[(&[i64], &[u8])]) -> Result<(Vec<i64>, Buffer)>;

    /// MXNet's `Quantize`: `residual += grad`, then the code of each element into `packed`
    /// (of `compression.packed_bytes(grad.len())` bytes), and what the codes carry taken off
    /// `residual`.
    fn compress(&self, compression: &GradientCompression, grad: &[f32], residual: &mut [f32], packed: &mut [u8]);

    /// MXNet's `Dequantize`: the values the codes in `packed` stand for, into `out`.
    fn decompress(&self, compression: &GradientCompression, packed: &[u8], out: &mut [f32]);
}
