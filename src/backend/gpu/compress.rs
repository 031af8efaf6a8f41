//! Compressed sums on a GPU (MXNet's `CommDevice::ReduceCompressed`) when a key's values,
//! their residuals and the merge buffer share one device: each value quantised against its
//! residual, its codes dequantised into the merge buffer (the first written, the next added:
//! the left fold). Values spread over several GPUs are staged through the host (`staged`).

use crate::backend::CompressedSumJob;
use crate::compression::CompressionType;
use crate::engine::{engine, OpDone, Var};
use crate::error::Error;
use crate::gpu::sums::{dequantize, quantize};
use crate::gpu::{DevicePtr, Queue};
use crate::ndarray::{DType, NDArray};
use std::sync::Arc;

/// Whether the GPU compresses `job` itself: float32 values, residuals and output on one GPU.
pub(super) fn is_native(job: &CompressedSumJob) -> bool {
    let ctx = job.dst.ctx();
    let here = |a: &NDArray| a.on_device() && a.ctx() == ctx && a.dtype() == DType::Float32;
    here(&job.dst) && job.values.iter().all(here) && job.residuals.iter().all(here) && job.residuals.len() >= job.values.len()
}

/// Schedules the compressed sums of `batch` (each [`is_native`]) as one op.
pub(super) fn push_compressed(batch: Vec<CompressedSumJob>, priority: i32) {
    let batch = Arc::new(batch);
    let reads: Vec<&Var> = batch.iter().flat_map(|j| j.values.iter().map(NDArray::var)).collect();
    let writes: Vec<&Var> = batch.iter().flat_map(|j| j.residuals.iter().chain(std::iter::once(&j.dst)).map(NDArray::var)).collect();
    let batch_for_op = Arc::clone(&batch);
    engine().push_async(&reads, &writes, priority, move |_, done| run(batch_for_op, done));
}

fn ptr(a: &NDArray) -> Option<DevicePtr> {
    a.device_ptr()
}

fn run(batch: Arc<Vec<CompressedSumJob>>, done: OpDone) {
    let bytes = batch.iter().map(|j| j.dst.data_byte_len() * (2 * j.values.len() + 1)).sum();
    let span = super::traced_span("gpu_compressed_sum", batch.len(), bytes, &batch[0].dst);
    let mut q = Queue::new();
    for job in batch.iter() {
        let (Some(dst), n) = (ptr(&job.dst), job.dst.size() as u64) else { break };
        let gc = job.compression;
        let one_bit = gc.kind == CompressionType::OneBit;
        let packed_len = gc.packed_bytes(n as usize);
        let Some(packed) = q.alloc_temp(dst.ordinal, packed_len) else { break };
        for (i, (v, r)) in job.values.iter().zip(&job.residuals).enumerate() {
            let (Some(g), Some(res)) = (ptr(v), ptr(r)) else { break };
            quantize(&mut q, one_bit, packed, packed_len as u64, g, res, n, gc.threshold);
            dequantize(&mut q, one_bit, dst, packed, n, gc.threshold, i > 0);
        }
        q.free_temp(packed);
    }
    q.finish(
        Box::new(move |r| {
            done.finish(r.map_err(Error::new));
            drop(span);
        }),
        Box::new(batch),
    );
}
