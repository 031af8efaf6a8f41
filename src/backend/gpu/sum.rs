//! Dense sums on a GPU (the `device` store's merge buffers): each value not already on the
//! sum's device is copied into a buffer there (peer copies between GPUs, pinned staging from
//! the host), then summed in the store's order — small keys of a batch in one fused launch
//! per device, bigger keys by `sum_<dtype>` launches each. One engine op per batch, completed
//! from the event. Outputs of a pull that joined the op (`crate::store`'s fusion) are written
//! by a big key's last launch (`sum_out_<dtype>`), or copied after the kernels.
//!
//! The copy buffers are MXNet's `CommDevice` `copy_buf`: kept with the merge buffer
//! ([`super::kept`]), one per value position whose value is on another device, made at the
//! key's first such push and reused by every later one; so is each device's fused table,
//! kept with its first key.

use crate::backend::{SumJob, SumOrder};
use crate::engine::{engine, OpDone, Ticket, Var};
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
    let reads: Vec<&Var> = batch.iter().flat_map(|j| values[j.values.clone()].iter().map(NDArray::var)).collect();
    let writes: Vec<&Var> = batch.iter().map(|j| j.dst.var()).collect();
    let values_for_op = Arc::clone(values);
    let batch_for_op = Arc::clone(&batch);
    let work = move |_: &crate::engine::OpEnv, done| run(order, values_for_op, batch_for_op, done);
    let extensible = batch.iter().any(|j| j.tail.is_some());
    engine().push_device(&reads, &writes, priority, extensible, work)
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
    let bytes = batch.iter().map(|j| j.dst.data_byte_len() * (j.values.len() + 1)).sum();
    let span = super::traced_span("gpu_sum", batch.len(), bytes, &batch[0].dst);
    let mut q = Queue::new();
    // Per device: the small keys, and the first one's destination (keeping the table).
    let mut small: Vec<(i32, Vec<SmallKey>, &NDArray)> = Vec::new();
    // Outputs of pulls that joined (on the sums' own GPUs: their streams order the copies
    // after the kernels); the op started, so no more can be handed. A big sum writes up to
    // MAX_SOURCES of them in its own pass; the others are copied after the kernels.
    let (mut joined, mut written_by_sums): (Vec<(NDArray, NDArray)>, Vec<NDArray>) = (Vec::new(), Vec::new());
    for job in batch.iter() {
        let outs = job.tail.as_ref().map(|t| t.take()).unwrap_or_default();
        let Some(dst) = job.dst.device_ptr() else {
            q.fail("internal error: a GPU sum into host memory".into());
            break;
        };
        let mut srcs = Vec::with_capacity(job.values.len());
        for (position, v) in values[job.values.clone()].iter().enumerate() {
            match source_on(&mut q, dst.ordinal, v, &job.dst, position) {
                Some(p) => srcs.push(p),
                None => break,
            }
        }
        if q.failed() {
            break;
        }
        let (n, dtype) = (job.dst.size() as u64, job.dst.dtype());
        if n <= SMALL_KEY_ELEMS {
            let key = SmallKey { dst: dst.addr, srcs: srcs.iter().map(|p| p.addr).collect(), n, dtype, order };
            match small.iter_mut().find(|(o, _, _)| *o == dst.ordinal) {
                Some((_, keys, _)) => keys.push(key),
                None => small.push((dst.ordinal, vec![key], &job.dst)),
            }
        } else {
            // Written by the kernel when every output is on the sum's GPU (else all copied).
            let out_ptrs: Vec<_> = outs.iter().map_while(NDArray::device_ptr).filter(|p| p.ordinal == dst.ordinal).collect();
            let by_kernel: &[_] = if out_ptrs.len() == outs.len() { &out_ptrs } else { &[] };
            let written = sums::sum_to(&mut q, dst, &srcs, n, dtype, order, by_kernel);
            let mut outs = outs.into_iter();
            written_by_sums.extend(outs.by_ref().take(written));
            joined.extend(outs.map(|o| (job.dst.clone(), o)));
            continue;
        }
        joined.extend(outs.into_iter().map(|o| (job.dst.clone(), o)));
    }
    for (ordinal, keys, first) in &small {
        sums::fused(&mut q, *ordinal, keys, |q: &mut Queue, table: &[u8]| kept::table(q, first, Use::FusedTable, *ordinal, table));
    }
    let landings = super::copy::enqueue_copies(&mut q, &joined);
    q.finish(
        Box::new(move |r| {
            let landed = r.map_err(Error::new).and_then(|()| super::copy::land(&landings));
            // Recorded before the op completes, so that a dump after a wait has it.
            drop(span);
            done.finish(landed);
        }),
        Box::new((values, batch, joined, written_by_sums)),
    );
}
