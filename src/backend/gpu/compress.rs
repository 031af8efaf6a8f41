//! Compressed sums on GPUs (MXNet's `CommDevice::ReduceCompressed`): each value quantised
//! against its residual on its own GPU, the codes copied to the merge buffer's GPU and
//! dequantised there (the first written, the next added: the left fold). The streams of the
//! two GPUs are ordered by events (`Queue::order_after`), never by the host.

use super::kept::{self, Use};
use crate::backend::CompressedSumJob;
use crate::compression::CompressionType;
use crate::engine::{DeviceOp, engine, OpDone, Var};
use crate::error::Error;
use crate::gpu::sums::{dequantize, quantize};
use crate::gpu::{DevicePtr, Place, Queue};
use crate::ndarray::{DType, NDArray};
use std::sync::Arc;

/// Whether the GPU compresses `job` itself: float32 values and output on GPUs, each value's
/// residual on the value's GPU (where it is quantised).
pub(super) fn is_native(job: &CompressedSumJob) -> bool {
    let on_gpu = |a: &NDArray| a.on_device() && a.dtype() == DType::Float32;
    on_gpu(&job.dst)
        && job.residuals.len() >= job.values.len()
        && job.values.iter().zip(&job.residuals).all(|(v, r)| on_gpu(v) && on_gpu(r) && v.ctx() == r.ctx())
}

/// Schedules the compressed sums of `batch` (each [`is_native`]) as one op.
pub(super) fn push_compressed(batch: Vec<CompressedSumJob>, priority: i32) {
    let batch = Arc::new(batch);
    let reads: Vec<Var> = batch.iter().flat_map(|j| j.values.iter().map(NDArray::var)).collect();
    let writes: Vec<Var> = batch.iter().flat_map(|j| j.residuals.iter().chain(std::iter::once(&j.dst)).map(NDArray::var)).collect();
    let batch_for_op = Arc::clone(&batch);
    engine().push_device(&reads, &writes, priority, DeviceOp::default(), move |_, done| run(batch_for_op, done));
}

fn ptr(a: &NDArray) -> Option<DevicePtr> {
    a.device_ptr()
}

fn run(batch: Arc<Vec<CompressedSumJob>>, done: OpDone) {
    let bytes = || batch.iter().map(|j| j.dst.data_byte_len() * (2 * j.values.len() + 1)).sum();
    let span = super::traced_span("gpu_compressed_sum", batch.len(), bytes, &batch[0].dst);
    let mut q = Queue::new();
    for job in batch.iter() {
        let (Some(dst), n) = (ptr(&job.dst), job.dst.size() as u64) else { break };
        let gc = job.compression;
        let one_bit = gc.kind == CompressionType::OneBit;
        let packed_len = gc.packed_bytes(n as usize);
        let Some(packed) = kept::buffer(&mut q, &job.dst, Use::Packed, dst.ordinal, packed_len) else { break };
        for (i, (v, r)) in job.values.iter().zip(&job.residuals).enumerate() {
            let (Some(g), Some(res)) = (ptr(v), ptr(r)) else { break };
            if g.ordinal == dst.ordinal {
                quantize(&mut q, one_bit, packed, packed_len as u64, g, res, n, gc.threshold);
            } else {
                // Quantised on the value's GPU, the codes copied to the merge GPU.
                let Some(remote) = kept::buffer(&mut q, &job.dst, Use::RemotePacked(i), g.ordinal, packed_len) else { break };
                quantize(&mut q, one_bit, remote, packed_len as u64, g, res, n, gc.threshold);
                q.order_after(dst.ordinal, g.ordinal);
                q.copy_before_kernels(Place::Device(packed), Place::Device(remote), packed_len);
                q.order_after(g.ordinal, dst.ordinal);
            }
            dequantize(&mut q, one_bit, dst, packed, n, gc.threshold, i > 0);
        }
    }
    q.finish(
        Box::new(move |r| {
            // Recorded before the op completes, so that a dump after a wait has it.
            drop(span);
            done.finish(r.map_err(Error::new));
        }),
        Box::new(batch),
    );
}
