//! Dense sums on a GPU (the `device` store's merge buffers): each value not already on the
//! sum's device is copied into a buffer there (peer copies between GPUs, pinned staging from
//! the host), then summed in the store's order — the keys of a batch in one fused launch per
//! device, except a big key whose pull joined the op: its `sum_<dtype>` launches write the
//! pull's outputs in the same pass (`sum_out_<dtype>`, the last one). One engine op per
//! batch, completed from the event. Other outputs of a pull that joined the op
//! (`crate::store`'s fusion) are copied after the kernels.
//!
//! The copy buffers are MXNet's `CommDevice` `copy_buf`: kept with the merge buffer
//! ([`super::kept`]), one per value position whose value is on another device, made at the
//! key's first such push and reused by every later one; so is each device's fused table,
//! kept with its first key.

use crate::backend::{SumJob, SumOrder};
use crate::engine::{engine, DeviceOp, OpDone, Ticket, Var};
use crate::error::Error;
use crate::gpu::fused::SmallKey;
use crate::gpu::sums::{self, SMALL_KEY_ELEMS};
use super::kept::{self, Use};
use crate::gpu::{DevicePtr, Place, Queue};
use crate::ndarray::{DType, NDArray, StorageType};
use std::sync::Arc;

/// Whether the GPU sums `job` itself: a dense sum into GPU memory of values of its dtype.
pub(super) fn is_native(values: &[NDArray], job: &SumJob) -> bool {
    let dst = &job.dst;
    dst.on_device()
        && dst.dtype() != DType::Bool
        && values[job.values.clone()].iter().all(|v| v.stype() == StorageType::Default && v.dtype() == dst.dtype())
}

/// Schedules the sums of `batch` (each [`is_native`]) as one op; returns its ticket when a
/// job has a tail (a pull may join it: `crate::store`'s fusion).
pub(super) fn push_sums(order: SumOrder, values: &Arc<Vec<NDArray>>, batch: Vec<SumJob>, priority: i32) -> Option<Ticket> {
    let batch = Arc::new(batch);
    // Sized up front: a flattened iterator gives no length, and a call of thousands of values
    // would grow the vector a dozen times.
    let mut reads: Vec<Var> = Vec::with_capacity(batch.iter().map(|j| j.values.len()).sum());
    reads.extend(batch.iter().flat_map(|j| values[j.values.clone()].iter().map(NDArray::var)));
    let writes: Vec<Var> = batch.iter().map(|j| j.dst.var()).collect();
    let values_for_op = Arc::clone(values);
    let batch_for_op = Arc::clone(&batch);
    let work = move |_: &crate::engine::OpEnv, done| run(order, values_for_op, batch_for_op, done);
    let extensible = batch.iter().any(|j| j.tail.is_some());
    let tiny = reads.len() + writes.len() <= super::TINY_OP_ARRAYS;
    engine().push_device(&reads, &writes, priority, DeviceOp { tiny, extensible, stream: None }, work)
}

/// The address on `ordinal` that the sum into `dst` reads value `position`, `v`, from: its
/// own, or its copy buffer filled from it.
fn source_on(q: &mut Queue, ordinal: i32, v: &NDArray, dst: &NDArray, position: usize) -> Option<DevicePtr> {
    let from = match super::copy::source_place(q, v) {
        Ok(Place::Device(p)) if p.ordinal == ordinal => return Some(p),
        Ok(place) => place,
        Err(e) => {
            q.fail(e.message().to_string());
            return None;
        }
    };
    let bytes = v.data_byte_len();
    let buffer = kept::buffer(q, dst, Use::Copy(position), ordinal, bytes)?;
    q.copy_before_kernels(Place::Device(buffer), from, bytes);
    Some(buffer)
}

fn run(order: SumOrder, values: Arc<Vec<NDArray>>, batch: Arc<Vec<SumJob>>, done: OpDone) {
    let bytes = || batch.iter().map(|j| j.dst.data_byte_len() * (j.values.len() + 1)).sum();
    let span = super::traced_span("gpu_sum", batch.len(), bytes, &batch[0].dst);
    let mut q = Queue::new();
    // Per device: the keys of the fused launch, the first one's destination (keeping the
    // table), and the bytes its table would take with every key of the batch on the device.
    let mut fused: Vec<(i32, Vec<SmallKey>, &NDArray, usize)> = Vec::new();
    // Outputs of pulls that joined (on the sums' own GPUs: their streams order the copies
    // after the kernels); the op started, so no more can be handed. A big sum writes up to
    // MAX_SOURCES of them in its own pass; the others are copied after the kernels.
    let (mut joined, mut written_by_sums): (Vec<(NDArray, NDArray)>, Vec<NDArray>) = (Vec::new(), Vec::new());
    // Each key's source addresses, in one vector reused key after key.
    let mut srcs = Vec::new();
    for job in batch.iter() {
        let outs = job.tail.as_ref().map(|t| t.take()).unwrap_or_default();
        let Some(dst) = job.dst.device_ptr() else {
            q.fail("internal error: a GPU sum into host memory".into());
            break;
        };
        srcs.clear();
        for (position, v) in values[job.values.clone()].iter().enumerate() {
            match source_on(&mut q, dst.ordinal, v, &job.dst, position) {
                Some(p) => srcs.push(p),
                None => break,
            }
        }
        if q.failed() {
            break;
        }
        // Whether a big key's pull joined depends on timing; the table's room does not.
        let room = sums::table_bytes(srcs.len());
        let device = match fused.iter().position(|f| f.0 == dst.ordinal) {
            Some(i) => i,
            None => {
                fused.push((dst.ordinal, Vec::new(), &job.dst, 0));
                fused.len() - 1
            }
        };
        fused[device].3 += room;
        let (n, dtype) = (job.dst.size() as u64, job.dst.dtype());
        if n > SMALL_KEY_ELEMS && !outs.is_empty() {
            // Written by the kernel when every output is on the sum's GPU (else all copied).
            let out_ptrs: Vec<_> = outs.iter().map_while(NDArray::device_ptr).filter(|p| p.ordinal == dst.ordinal).collect();
            let by_kernel: &[_] = if out_ptrs.len() == outs.len() { &out_ptrs } else { &[] };
            let written = sums::sum_to(&mut q, dst, &srcs, n, dtype, order, by_kernel);
            let mut outs = outs.into_iter();
            written_by_sums.extend(outs.by_ref().take(written));
            joined.extend(outs.map(|o| (job.dst.clone(), o)));
            continue;
        }
        // Summed in the device's one fused launch: a launch per key costs the GPU more than
        // the key's bytes (microseconds each, for tens of keys a call).
        fused[device].1.push(SmallKey { dst: dst.addr, srcs: srcs.iter().map(|p| p.addr).collect(), n, dtype, order });
        joined.extend(outs.into_iter().map(|o| (job.dst.clone(), o)));
    }
    for (ordinal, keys, first, room) in &fused {
        sums::fused(&mut q, *ordinal, keys, *room, |q: &mut Queue, table: &[u8]| {
            kept::table(q, first, Use::FusedTable, *ordinal, table, *room)
        });
    }
    let landings = super::copy::enqueue_copies(&mut q, joined.iter().map(|(s, d)| (s, d)), joined.len());
    let (signal, stream) = (done.stream_signal(), q.only_compute_stream());
    q.finish(
        Box::new(move |r| {
            let landed = r.map_err(Error::new).and_then(|()| super::copy::land(&landings));
            // Recorded before the op completes, so that a dump after a wait has it.
            drop(span);
            done.finish(landed);
        }),
        Box::new((values, batch, joined, written_by_sums)),
    );
    super::signal_enqueued(signal, stream);
}
