//! Scheduling a checked call's work on the engine. Small keys are batched into one op: the
//! engine's per-op cost (registration, a worker wake-up) would otherwise dominate a call that
//! moves a few kilobytes per key. Big keys get an op each, split over threads inside.

use crate::compression::GradientCompression;
use crate::engine::{engine, Var};
use crate::profiler::{self, Arg};
use crate::ndarray::buffer::{typed, typed_mut};
use crate::ndarray::{NDArray, StorageType};
use crate::reduce::sparse;
use crate::reduce::{copy_cast_many, copy_cast_many_unfenced, fence_copies, sum_into, SumOrder};
use std::ops::Range;
use std::sync::Arc;

/// Bytes moved per batched op: big enough to amortise an op (registration, and often a worker
/// wake-up, which costs tens of microseconds on a VM), small enough that a call with many
/// keys still spreads over the workers. A/B on `small` (kvbench, 6-8 alternating runs): 256
/// KiB 8.0 ms, 1 MiB 5.6-6.6 ms, 4 MiB 5.1-5.5 ms, 8-16 MiB no better; resnet50 unchanged.
const BATCH_BYTES: usize = 4 << 20;

/// `dst = Σ values[range]` for one key, `values` being shared by all of a call's sums.
pub(crate) struct SumJob {
    pub values: Range<usize>,
    pub dst: NDArray,
}

/// `dst = Σ dequantize(quantize(values[i], residuals[i]))` for one key.
pub(crate) struct CompressedSumJob {
    pub values: Vec<NDArray>,
    pub residuals: Vec<NDArray>,
    pub dst: NDArray,
    pub compression: GradientCompression,
}

/// `outs[i] = src` for each `i` in `dsts`, `outs` being shared by all of a call's copies.
pub(crate) struct CopyJob {
    pub src: NDArray,
    pub dsts: Range<usize>,
}

/// Batches moving at most this many bytes run on the calling thread when they are ready at
/// once (a latency-bound push or pull of a few small values): a few microseconds of copying
/// against a worker wake-up.
const TINY_BYTES: usize = 16 << 10;

/// Schedules a batch's op: inline when tiny and ready (see [`TINY_BYTES`]), on a worker
/// otherwise. `work` is told whether the batch's arrays are disjoint (see
/// [`Engine::push_batch`](crate::engine::Engine::push_batch)).
/// `name` and `keys`, with the bytes and the first written array's context, are what the
/// profiler shows for the op.
#[allow(clippy::too_many_arguments)]
fn submit(name: &'static str, keys: usize, ctx: &NDArray, bytes: usize, reads: &[&Var], writes: &[&Var], priority: i32, work: impl FnOnce(bool) + Send + 'static) {
    let work = profiler::traced(name, || op_args(keys, bytes, ctx), work);
    engine().push_batch(reads, writes, priority, bytes <= TINY_BYTES, work);
}

fn op_args(keys: usize, bytes: usize, ctx: &NDArray) -> profiler::Args {
    vec![("keys", Arg::Int(keys as i64)), ("bytes", Arg::Int(bytes as i64)), ("context", Arg::Text(ctx.ctx().to_string()))]
}

/// Splits jobs into batches of about [`BATCH_BYTES`] moved, keeping order; each batch comes
/// with its byte count.
fn batches<J>(jobs: Vec<J>, bytes: impl Fn(&J) -> usize) -> Vec<(usize, Vec<J>)> {
    let mut out: Vec<(usize, Vec<J>)> = Vec::new();
    for job in jobs {
        let b = bytes(&job);
        match out.last_mut() {
            Some((size, batch)) if *size + b <= BATCH_BYTES => {
                batch.push(job);
                *size += b;
            }
            _ => out.push((b, vec![job])),
        }
    }
    out
}

/// Schedules the sums of `values` and returns at once.
pub(crate) fn schedule_sums(order: SumOrder, values: Vec<NDArray>, jobs: Vec<SumJob>, priority: i32) {
    // Shared with the ops, not cloned: cloning views touches refcounts the workers use too.
    let values = Arc::new(values);
    for (bytes, batch) in batches(jobs, |j| j.dst.data_byte_len() * (j.values.len() + 1)) {
        let batch = Arc::new(batch);
        let mut reads: Vec<&Var> = Vec::with_capacity(batch.iter().map(|j| j.values.len()).sum());
        reads.extend(batch.iter().flat_map(|j| values[j.values.clone()].iter().map(|v| v.var())));
        let writes: Vec<&Var> = batch.iter().map(|j| j.dst.var()).collect();
        let work = {
            let (batch, values) = (Arc::clone(&batch), Arc::clone(&values));
            move |disjoint| run_sum_batch(order, &values, &batch, disjoint)
        };
        submit("sum", batch.len(), &batch[0].dst, bytes, &reads, &writes, priority, work);
    }
}

/// Runs a batch of sums, the usual batch (dense, sums into distinct memory) under locks all
/// taken first: lock operations wait for pending stores, and locking around each small sum
/// would stall on every key in turn (see [`run_copy_batch`]).
fn run_sum_batch(order: SumOrder, values: &[NDArray], batch: &[SumJob], disjoint: bool) {
    let reads: Vec<&NDArray> = batch.iter().flat_map(|j| &values[j.values.clone()]).collect();
    let writes: Vec<&NDArray> = batch.iter().map(|j| &j.dst).collect();
    if !lockable_together(disjoint, &reads, &writes) {
        for job in batch {
            run_sum(order, &values[job.values.clone()], &job.dst);
        }
        return;
    }
    let views: Vec<_> = reads.iter().map(|a| a.read_view()).collect();
    let mut guards: Vec<_> = writes.iter().map(|a| a.write_view()).collect();
    let mut views = views.iter();
    let mut srcs: Vec<&[u8]> = Vec::new();
    for (job, guard) in batch.iter().zip(guards.iter_mut()) {
        srcs.clear();
        srcs.extend(views.by_ref().take(job.values.len()).map(|v| v.bytes()));
        sum_into(job.dst.dtype(), order, guard.bytes_mut(), &srcs);
    }
}

/// The sum of one key, under the chunks' locks (values never share memory with `dst`). A
/// row_sparse `dst` (all values row_sparse) gets the union of the rows; a dense `dst` with
/// row_sparse values among its sources sums their dense forms.
fn run_sum(order: SumOrder, values: &[NDArray], dst: &NDArray) {
    if dst.stype() == StorageType::RowSparse {
        let rows: Vec<_> = values.iter().map(|v| v.rows_now()).collect();
        let inputs: Vec<(&[i64], &[u8])> = rows.iter().map(|r| (&r.ids[..], &r.data[..])).collect();
        // Allocation failure is the only error; the op has no caller to report to.
        if let Ok((ids, data)) = sparse::sum_rows(dst.dtype(), dst.row_bytes(), &inputs) {
            let _ = dst.set_rows_now(&ids, data);
        }
        return;
    }
    if values.iter().any(|v| v.stype() != StorageType::Default) {
        let dense: Vec<Vec<u8>> = values
            .iter()
            .map(|v| match v.stype() {
                StorageType::Default => v.read_bytes(|b| b.to_vec()),
                _ => {
                    let rows = v.rows_now();
                    let mut b = vec![0u8; dst.data_byte_len()];
                    sparse::densify(v.row_bytes(), &rows.ids, &rows.data, &mut b);
                    b
                }
            })
            .collect();
        let srcs: Vec<&[u8]> = dense.iter().map(|b| &b[..]).collect();
        let dtype = dst.dtype();
        dst.write_bytes(|d| sum_into(dtype, order, d, &srcs));
        return;
    }
    let views: Vec<_> = values.iter().map(|v| v.read_view()).collect();
    let srcs: Vec<&[u8]> = views.iter().map(|v| v.bytes()).collect();
    let dtype = dst.dtype();
    dst.write_bytes(|d| sum_into(dtype, order, d, &srcs));
}

/// Schedules compressed sums (float32 values, checked) and returns at once.
pub(crate) fn schedule_compressed_sums(jobs: Vec<CompressedSumJob>, priority: i32) {
    for (bytes, batch) in batches(jobs, |j| j.dst.data_byte_len() * (2 * j.values.len() + 1)) {
        let batch = Arc::new(batch);
        let reads: Vec<&Var> = batch.iter().flat_map(|j| j.values.iter().map(|v| v.var())).collect();
        let writes: Vec<&Var> =
            batch.iter().flat_map(|j| j.residuals.iter().map(|r| r.var()).chain(std::iter::once(j.dst.var()))).collect();
        let work = {
            let batch = Arc::clone(&batch);
            move |_| {
                for job in batch.iter() {
                    run_compressed_sum(job);
                }
            }
        };
        submit("compressed_sum", batch.len(), &batch[0].dst, bytes, &reads, &writes, priority, work);
    }
}

/// Quantises each value against its residual, dequantises, and sums left to right as MXNet's
/// CommDevice does (`((d0 + d1) + d2) + ...`).
fn run_compressed_sum(job: &CompressedSumJob) {
    let gc = job.compression;
    let views: Vec<_> = job.values.iter().map(|v| v.read_view()).collect();
    let mut residuals: Vec<_> = job.residuals.iter().map(|r| r.write_view()).collect();
    let mut dst = job.dst.write_view();
    let out = typed_mut::<f32>(dst.bytes_mut());
    let mut packed = vec![0u8; gc.packed_bytes(out.len())];
    let mut dequantized = vec![0f32; out.len()];
    for (i, (value, residual)) in views.iter().zip(residuals.iter_mut()).enumerate() {
        gc.quantize(typed::<f32>(value.bytes()), typed_mut::<f32>(residual.bytes_mut()), &mut packed);
        if i == 0 {
            gc.dequantize(&packed, out);
        } else {
            gc.dequantize(&packed, &mut dequantized);
            for (o, d) in out.iter_mut().zip(&dequantized) {
                *o += *d;
            }
        }
    }
}

/// Schedules the copies into `outs` and returns at once.
pub(crate) fn schedule_copies(outs: Vec<NDArray>, jobs: Vec<CopyJob>, priority: i32) {
    let outs = Arc::new(outs);
    for (bytes, batch) in batches(jobs, |j| j.src.data_byte_len() * (j.dsts.len() + 1)) {
        let batch = Arc::new(batch);
        let reads: Vec<&Var> = batch.iter().map(|j| j.src.var()).collect();
        let mut writes: Vec<&Var> = Vec::with_capacity(batch.iter().map(|j| j.dsts.len()).sum());
        writes.extend(batch.iter().flat_map(|j| outs[j.dsts.clone()].iter().map(|d| d.var())));
        let work = {
            let (batch, outs) = (Arc::clone(&batch), Arc::clone(&outs));
            move |disjoint| run_copy_batch(&outs, &batch, disjoint)
        };
        submit("copy", batch.len(), outs.get(batch[0].dsts.start).unwrap_or(&batch[0].src), bytes, &reads, &writes, priority, work);
    }
}

/// Whether a batch's arrays can all be locked at once: disjoint (as the engine found when it
/// registered the batch: no memory written twice, or both read and written; reads may repeat,
/// and locks are not re-entrant) and dense.
fn lockable_together(disjoint: bool, reads: &[&NDArray], writes: &[&NDArray]) -> bool {
    disjoint && reads.iter().chain(writes).all(|a| a.stype() == StorageType::Default)
}

/// Runs a batch of copies. The usual batch (dense, distinct outputs) takes every lock first,
/// copies with streaming stores, fences once and then releases: a lock operation waits for
/// the streamed bytes to reach memory, so locking around each small copy would stall on
/// every output in turn.
fn run_copy_batch(outs: &[NDArray], batch: &[CopyJob], disjoint: bool) {
    let reads: Vec<&NDArray> = batch.iter().map(|j| &j.src).collect();
    let writes: Vec<&NDArray> = batch.iter().flat_map(|j| &outs[j.dsts.clone()]).collect();
    if !lockable_together(disjoint, &reads, &writes) {
        for job in batch {
            run_copies(&job.src, &outs[job.dsts.clone()]);
        }
        return;
    }
    let views: Vec<_> = reads.iter().map(|a| a.read_view()).collect();
    let mut guards: Vec<_> = writes.iter().map(|a| a.write_view()).collect();
    let mut guards = guards.iter_mut();
    let mut dsts: Vec<(crate::ndarray::DType, &mut [u8])> = Vec::new();
    for (job, view) in batch.iter().zip(&views) {
        dsts.clear();
        dsts.extend(outs[job.dsts.clone()].iter().zip(guards.by_ref()).map(|(d, g)| (d.dtype(), g.bytes_mut())));
        copy_cast_many_unfenced(job.src.dtype(), view.bytes(), &mut dsts);
    }
    fence_copies();
}

/// Copies `src` into every `dst`, reading `src` once per block while writing all outputs.
fn run_copies(src: &NDArray, dsts: &[NDArray]) {
    // Sparse sides, and outputs sharing memory with the source or with each other, take the
    // general path.
    let dense = src.stype() == StorageType::Default && dsts.iter().all(|d| d.stype() == StorageType::Default);
    if !dense {
        for d in dsts {
            src.copy_any_now(d);
        }
        return;
    }
    let distinct = dsts.iter().enumerate().all(|(i, d)| !d.same_chunk(src) && dsts[..i].iter().all(|e| !e.same_chunk(d)));
    if !distinct {
        for d in dsts {
            src.copy_into_now(d);
        }
        return;
    }
    let view = src.read_view();
    let mut guards: Vec<_> = dsts.iter().map(|d| d.write_view()).collect();
    let mut outs: Vec<(crate::ndarray::DType, &mut [u8])> =
        guards.iter_mut().zip(dsts).map(|(g, d)| (d.dtype(), g.bytes_mut())).collect();
    copy_cast_many(src.dtype(), view.bytes(), &mut outs);
}

/// Schedules `out = the rows rid of stored` (a checked row_sparse pull) and returns at once.
pub(crate) fn schedule_row_sparse_pull(stored: NDArray, out: NDArray, rid: NDArray, priority: i32) {
    let reads = [stored.var(), rid.var()];
    let writes = [out.var()];
    let (s, o, r) = (stored.clone(), out.clone(), rid.clone());
    engine().push(&reads, &writes, priority, Box::new(move || {
        // Row ids of any dtype and shape: cast to int64, sorted, unique.
        let mut want = vec![0i64; r.size()];
        r.read_bytes(|b| crate::reduce::copy_cast(r.dtype(), b, crate::ndarray::DType::Int64, bytemuck::cast_slice_mut(&mut want)));
        want.sort_unstable();
        want.dedup();
        let rows = s.rows_now();
        let Ok(kept) = sparse::retain(s.row_bytes(), &rows.ids, &rows.data, &want) else { return };
        let data = if s.dtype() == o.dtype() {
            kept
        } else {
            let Ok(mut cast) = crate::ndarray::buffer::Buffer::zeroed(want.len() * o.row_bytes()) else { return };
            crate::reduce::copy_cast(s.dtype(), kept.bytes(), o.dtype(), cast.bytes_mut());
            cast
        };
        let _ = o.set_rows_now(&want, data);
    }));
}
