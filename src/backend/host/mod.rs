//! The host backend: arrays in host memory (`cpu`, `cpu_pinned`, `cpu_shared`). Each batch the
//! store hands over becomes one engine op; the op picks the kernels (`reduce`, `compression`)
//! and takes the arrays' memory locks. It knows nothing of GPUs: the seam
//! (`src/backend/mod.rs`) hands a job touching GPU memory (a `local` store's GPU values, a pull
//! into GPU outputs) to the GPU backend, which stages what it does not run on a GPU back here.

mod bytes;
mod copy;
mod failpoint;

use super::{Backend, ByteKernels, CompressedSumJob, CopyJob, RowSparsePull, SumJob, SumOrder};
use crate::base::buffer::{typed, typed_mut, Buffer};
use crate::base::DType;
use crate::engine::{engine, OpEnv, Ticket, Var};
use crate::error::Result;
use crate::profiler::{self, Arg};
use crate::ndarray::{NDArray, StorageType};
use crate::reduce::sparse;
use crate::reduce::{copy_cast_many, copy_cast_many_unfenced, fence_copies, sum_into, sum_into_with_copies};
use std::sync::Arc;

pub(crate) use bytes::HOST_BYTES;
pub(crate) use copy::copy_any_now;

/// The host backend.
pub(crate) struct Host;

/// The one host backend.
pub(crate) static HOST: Host = Host;

/// Batches moving at most this many bytes run on the calling thread when they are ready at
/// once (a latency-bound push or pull of a few small values): a few microseconds of copying
/// against a worker wake-up.
const TINY_BYTES: usize = 16 << 10;

/// Schedules a batch's op: inline when tiny and ready (see [`TINY_BYTES`]), on a worker
/// otherwise. `name` and `keys`, with the bytes and the context of `shown`, are what the
/// profiler shows for the op. With `extensible`, returns the op's ticket.
#[allow(clippy::too_many_arguments)]
fn submit(
    name: &'static str,
    keys: usize,
    shown: &NDArray,
    bytes: usize,
    reads: &[Var],
    writes: &[Var],
    priority: i32,
    extensible: bool,
    work: impl FnOnce(&OpEnv) -> Result<()> + Send + 'static,
) -> Option<Ticket> {
    let work = profiler::traced(name, || op_args(keys, bytes, shown), work);
    engine().push_batch(reads, writes, priority, bytes <= TINY_BYTES, extensible, work)
}

fn op_args(keys: usize, bytes: usize, shown: &NDArray) -> profiler::Args {
    vec![("keys", Arg::Int(keys as i64)), ("bytes", Arg::Int(bytes as i64)), ("context", Arg::Text(shown.ctx().to_string()))]
}

impl Backend for Host {
    fn name(&self) -> &'static str {
        "host"
    }

    fn sum(&self, order: SumOrder, values: &Arc<Vec<NDArray>>, batch: Vec<SumJob>, bytes: usize, priority: i32) -> Option<Ticket> {
        // Shared with the op, not cloned: cloning views touches refcounts the workers use too.
        let batch = Arc::new(batch);
        let mut reads: Vec<Var> = Vec::with_capacity(batch.iter().map(|j| j.values.len()).sum());
        reads.extend(batch.iter().flat_map(|j| values[j.values.clone()].iter().map(|v| v.var())));
        let writes: Vec<Var> = batch.iter().map(|j| j.dst.var()).collect();
        let (values_for_op, batch_for_op) = (Arc::clone(values), Arc::clone(&batch));
        let extensible = batch.iter().any(|j| j.tail.is_some());
        submit("sum", batch.len(), &batch[0].dst, bytes, &reads, &writes, priority, extensible, move |env| run_sum_batch(order, &values_for_op, &batch_for_op, env))
    }

    fn compressed_sum(&self, batch: Vec<CompressedSumJob>, bytes: usize, priority: i32) {
        let batch = Arc::new(batch);
        let reads: Vec<Var> = batch.iter().flat_map(|j| j.values.iter().map(|v| v.var())).collect();
        let writes: Vec<Var> =
            batch.iter().flat_map(|j| j.residuals.iter().map(|r| r.var()).chain(std::iter::once(j.dst.var()))).collect();
        let batch_for_op = Arc::clone(&batch);
        submit("compressed_sum", batch.len(), &batch[0].dst, bytes, &reads, &writes, priority, false, move |_| batch_for_op.iter().try_for_each(run_compressed_sum));
    }

    fn copy(&self, outs: &Arc<Vec<NDArray>>, batch: Vec<CopyJob>, bytes: usize, priority: i32) {
        let batch = Arc::new(batch);
        let reads: Vec<Var> = batch.iter().map(|j| j.src.var()).collect();
        let mut writes: Vec<Var> = Vec::with_capacity(batch.iter().map(|j| j.dsts.len()).sum());
        writes.extend(batch.iter().flat_map(|j| outs[j.dsts.clone()].iter().map(|d| d.var())));
        let (outs_for_op, batch_for_op) = (Arc::clone(outs), Arc::clone(&batch));
        submit("copy", batch.len(), outs.get(batch[0].dsts.start).unwrap_or(&batch[0].src), bytes, &reads, &writes, priority, false, move |env| run_copy_batch(&outs_for_op, &batch_for_op, env));
    }

    fn row_sparse_pull(&self, pull: RowSparsePull, priority: i32) {
        let reads = [pull.stored.var(), pull.row_ids.var()];
        let writes = [pull.out.var()];
        let RowSparsePull { stored, out, row_ids } = pull.clone_views();
        engine().push(&reads, &writes, priority, move |_| run_row_sparse_pull(&stored, &out, &row_ids));
        drop(pull);
    }

    fn copy_any(&self, src: &NDArray, dst: &NDArray, priority: i32) {
        let (s, d) = (src.clone(), dst.clone());
        engine().push(&[src.var()], &[dst.var()], priority, move |env| copy_any_now(&s, &d, env.threads()));
    }

    fn copy_sync(&self, src: &NDArray, dst: &NDArray) -> Result<()> {
        src.check_copy_to(dst)?;
        let threads = engine().thread_budget();
        engine().run_sync(&[src.var()], &[dst.var()], || copy::copy_dense_now(src, dst, threads))?
    }

    fn byte_kernels(&self) -> &'static dyn ByteKernels {
        &HOST_BYTES
    }
}

impl RowSparsePull {
    fn clone_views(&self) -> RowSparsePull {
        RowSparsePull { stored: self.stored.clone(), out: self.out.clone(), row_ids: self.row_ids.clone() }
    }
}

/// Runs a batch of sums, the usual batch (dense, sums into distinct memory) under locks all
/// taken first: lock operations wait for pending stores, and locking around each small sum
/// would stall on every key in turn (see [`run_copy_batch`]). The outputs pulls handed to a
/// job ([`super::PullTail`]) are written in the sum's pass.
fn run_sum_batch(order: SumOrder, values: &[NDArray], batch: &[SumJob], env: &OpEnv) -> Result<()> {
    for job in batch {
        failpoint::check_sum(job.dst.size())?;
    }
    let tails: Vec<Vec<NDArray>> = batch.iter().map(|j| j.tail.as_ref().map_or_else(Vec::new, |t| t.take())).collect();
    let reads: Vec<&NDArray> = batch.iter().flat_map(|j| &values[j.values.clone()]).collect();
    let writes: Vec<&NDArray> = batch.iter().map(|j| &j.dst).chain(tails.iter().flatten()).collect();
    if !lockable_together(env.disjoint(), &reads, &writes) {
        return batch.iter().zip(&tails).try_for_each(|(job, tail)| {
            run_sum(order, &values[job.values.clone()], &job.dst, env.threads())?;
            if tail.is_empty() { Ok(()) } else { run_copies(&job.dst, tail, env.threads()) }
        });
    }
    let views = read_views(&reads);
    let mut guards = write_views(&writes);
    let (dst_guards, mut tail_guards) = guards.split_at_mut(batch.len());
    let mut ahead = views.iter().skip(batch.first().map_or(0, |j| j.values.len()));
    let mut views = views.iter();
    let mut srcs: Vec<&[u8]> = Vec::new();
    for (k, ((job, guard), tail)) in batch.iter().zip(dst_guards.iter_mut()).zip(&tails).enumerate() {
        if let Some(next) = batch.get(k + 1) {
            ahead.by_ref().take(next.values.len()).for_each(|v| prefetch_head(v.bytes()));
        }
        srcs.clear();
        srcs.extend(views.by_ref().take(job.values.len()).map(|v| v.bytes()));
        if tail.is_empty() {
            sum_into(job.dst.dtype(), order, guard.bytes_mut(), &srcs, env.threads());
            continue;
        }
        let (outs, rest) = std::mem::take(&mut tail_guards).split_at_mut(tail.len());
        tail_guards = rest;
        let mut outs: Vec<&mut [u8]> = outs.iter_mut().map(|g| g.bytes_mut()).collect();
        sum_into_with_copies(job.dst.dtype(), order, guard.bytes_mut(), &mut outs, &srcs, env.threads());
    }
    Ok(())
}

/// Lines of each of the next sum's sources asked for while the current sum runs: a small
/// key's value is a page or two, and the hardware prefetchers start a stream in a page only
/// after its first misses.
const SOURCE_LINES_AHEAD: usize = 16;

fn prefetch_head(bytes: &[u8]) {
    for offset in (0..bytes.len().min(SOURCE_LINES_AHEAD * 64)).step_by(64) {
        crate::base::prefetch::prefetch_line(bytes[offset..].as_ptr());
    }
}

/// `values`, each one sharing memory with `dst` replaced by a private copy, or `None` when
/// none does. A user may push the stored value itself (an updater's kept `local`) or the
/// merge buffer (a kept `recv`) back to its key: the sum then reads every source before it
/// writes, and never takes a chunk's write lock under its own read lock (a self-deadlock).
fn detached_from(values: &[NDArray], dst: &NDArray, threads: usize) -> Result<Option<Vec<NDArray>>> {
    if !values.iter().any(|v| v.same_chunk(dst)) {
        return Ok(None);
    }
    let detach = |v: &NDArray| -> Result<NDArray> {
        if !v.same_chunk(dst) {
            return Ok(v.clone());
        }
        let copy = v.empty_like(v.ctx())?;
        copy_any_now(v, &copy, threads)?;
        Ok(copy)
    };
    values.iter().map(detach).collect::<Result<Vec<_>>>().map(Some)
}

/// The sum of one key, under the chunks' locks (values sharing memory with `dst` are read
/// first, see [`detached_from`]). A row_sparse `dst` gets the union of the rows (a dense
/// source contributes its non-zero rows, as MXNet casts it to row_sparse first); a dense
/// `dst` with row_sparse values among its sources sums their dense forms.
fn run_sum(order: SumOrder, values: &[NDArray], dst: &NDArray, threads: usize) -> Result<()> {
    if let Some(values) = detached_from(values, dst, threads)? {
        return run_sum(order, &values, dst, threads);
    }
    if dst.stype() == StorageType::RowSparse {
        let rows = values
            .iter()
            .map(|v| match v.stype() {
                StorageType::RowSparse => v.rows_now().map(|r| (r.ids, r.data)),
                _ => v.read_bytes(|b| sparse::sparsify(dst.row_bytes(), b)).and_then(|(ids, data)| Ok((ids, crate::base::buffer::try_copy(data.bytes())?))),
            })
            .collect::<Result<Vec<_>>>()?;
        let inputs: Vec<(&[i64], &[u8])> = rows.iter().map(|(ids, data)| (&ids[..], &data[..])).collect();
        let (ids, data) = sparse::sum_rows(dst.dtype(), dst.row_bytes(), &inputs)?;
        return dst.set_rows_now(&ids, data);
    }
    if values.iter().any(|v| v.stype() != StorageType::Default) {
        let mut dense: Vec<Buffer> = Vec::with_capacity(values.len());
        for v in values {
            let mut b = Buffer::zeroed(dst.data_byte_len())?;
            match v.stype() {
                StorageType::Default => v.read_bytes(|s| b.bytes_mut().copy_from_slice(s)),
                _ => {
                    let rows = v.rows_now()?;
                    sparse::densify(v.row_bytes(), &rows.ids, &rows.data, b.bytes_mut());
                }
            }
            dense.push(b);
        }
        let srcs: Vec<&[u8]> = dense.iter().map(|b| b.bytes()).collect();
        let dtype = dst.dtype();
        dst.write_bytes(|d| sum_into(dtype, order, d, &srcs, threads));
        return Ok(());
    }
    let views: Vec<_> = values.iter().map(|v| v.read_view()).collect();
    let srcs: Vec<&[u8]> = views.iter().map(|v| v.bytes()).collect();
    let dtype = dst.dtype();
    dst.write_bytes(|d| sum_into(dtype, order, d, &srcs, threads));
    Ok(())
}

/// Quantises each value against its residual, dequantises, and sums left to right as MXNet's
/// CommDevice does (`((d0 + d1) + d2) + ...`).
fn run_compressed_sum(job: &CompressedSumJob) -> Result<()> {
    let gc = job.compression;
    let detached = detached_from(&job.values, &job.dst, 1)?;
    let values = detached.as_deref().unwrap_or(&job.values);
    let views: Vec<_> = values.iter().map(|v| v.read_view()).collect();
    let mut residuals: Vec<_> = job.residuals.iter().map(|r| r.write_view()).collect();
    let mut dst = job.dst.write_view();
    let out = typed_mut::<f32>(dst.bytes_mut());
    let mut packed = Buffer::zeroed(gc.packed_bytes(out.len()))?;
    let mut scratch = Buffer::zeroed(std::mem::size_of_val(out))?;
    let srcs: Vec<&[f32]> = views.iter().map(|v| typed::<f32>(v.bytes())).collect();
    let mut residuals: Vec<&mut [f32]> = residuals.iter_mut().map(|r| typed_mut::<f32>(r.bytes_mut())).collect();
    gc.reduce(&srcs, &mut residuals, out, packed.bytes_mut(), typed_mut::<f32>(scratch.bytes_mut()));
    Ok(())
}

/// Whether a batch's arrays can all be locked at once: disjoint (as the engine found when it
/// registered the batch: no memory written twice, or both read and written; reads may repeat,
/// and locks are not re-entrant) and dense.
fn lockable_together(disjoint: bool, reads: &[&NDArray], writes: &[&NDArray]) -> bool {
    disjoint && reads.iter().chain(writes).all(|a| a.stype() == StorageType::Default)
}

/// How many arrays ahead [`read_views`] and [`write_views`] ask for the lock's line.
const LOCK_AHEAD: usize = 8;

/// `lock` of every array of a batch (its read or write view), each lock's line asked for a few
/// arrays ahead: the locks of a batch's thousands of small arrays would otherwise miss one at
/// a time.
fn views_of<'a, V>(arrays: &[&'a NDArray], lock: impl Fn(&'a NDArray) -> V) -> Vec<V> {
    arrays.iter().take(LOCK_AHEAD).for_each(|a| a.prefetch_lock());
    let mut views = Vec::with_capacity(arrays.len());
    for (i, a) in arrays.iter().enumerate() {
        if let Some(ahead) = arrays.get(i + LOCK_AHEAD) {
            ahead.prefetch_lock();
        }
        views.push(lock(a));
    }
    views
}

/// Read locks on every array of a batch (see [`views_of`]).
fn read_views<'a>(arrays: &[&'a NDArray]) -> Vec<crate::ndarray::ReadView<'a>> {
    views_of(arrays, NDArray::read_view)
}

/// Write locks on every array of a batch (see [`views_of`]).
fn write_views<'a>(arrays: &[&'a NDArray]) -> Vec<crate::ndarray::WriteView<'a>> {
    views_of(arrays, NDArray::write_view)
}

/// Runs a batch of copies. The usual batch (dense, distinct outputs) takes every lock first,
/// copies with streaming stores, fences once and then releases: a lock operation waits for
/// the streamed bytes to reach memory, so locking around each small copy would stall on
/// every output in turn.
fn run_copy_batch(outs: &[NDArray], batch: &[CopyJob], env: &OpEnv) -> Result<()> {
    let reads: Vec<&NDArray> = batch.iter().map(|j| &j.src).collect();
    let writes: Vec<&NDArray> = batch.iter().flat_map(|j| &outs[j.dsts.clone()]).collect();
    if !lockable_together(env.disjoint(), &reads, &writes) {
        return batch.iter().try_for_each(|job| run_copies(&job.src, &outs[job.dsts.clone()], env.threads()));
    }
    let views = read_views(&reads);
    let mut guards = write_views(&writes);
    let mut guards = guards.iter_mut();
    let mut dsts: Vec<(DType, &mut [u8])> = Vec::new();
    for (job, view) in batch.iter().zip(&views) {
        dsts.clear();
        dsts.extend(outs[job.dsts.clone()].iter().zip(guards.by_ref()).map(|(d, g)| (d.dtype(), g.bytes_mut())));
        copy_cast_many_unfenced(job.src.dtype(), view.bytes(), &mut dsts, env.threads());
    }
    fence_copies();
    Ok(())
}

/// `dsts[i] = src` now, on the calling thread, inside an op that holds them both (a pull's
/// copies its push's sum could not write, see [`super::PullTail::take_back`]).
pub(crate) fn copy_now(src: &NDArray, dsts: &[NDArray]) -> Result<()> {
    run_copies(src, dsts, engine().thread_budget())
}

/// Copies `src` into every `dst`, reading `src` once per block while writing all outputs.
fn run_copies(src: &NDArray, dsts: &[NDArray], threads: usize) -> Result<()> {
    // Sparse sides, and outputs sharing memory with the source or with each other, take the
    // general path.
    let dense = src.stype() == StorageType::Default && dsts.iter().all(|d| d.stype() == StorageType::Default);
    if !dense {
        return dsts.iter().try_for_each(|d| copy_any_now(src, d, threads));
    }
    let distinct = dsts.iter().enumerate().all(|(i, d)| !d.same_chunk(src) && dsts[..i].iter().all(|e| !e.same_chunk(d)));
    if !distinct {
        return dsts.iter().try_for_each(|d| copy::copy_dense_now(src, d, threads));
    }
    let view = src.read_view();
    let mut guards: Vec<_> = dsts.iter().map(|d| d.write_view()).collect();
    let mut outs: Vec<(DType, &mut [u8])> = guards.iter_mut().zip(dsts).map(|(g, d)| (d.dtype(), g.bytes_mut())).collect();
    copy_cast_many(src.dtype(), view.bytes(), &mut outs, threads);
    Ok(())
}

/// `out = the rows rid of stored`: row ids of any dtype and shape, cast to int64, sorted,
/// unique (none from a value without rows: [`sparse::retained_rows`]).
fn run_row_sparse_pull(stored: &NDArray, out: &NDArray, rid: &NDArray) -> Result<()> {
    let mut want = Buffer::zeroed(rid.size() * DType::Int64.size())?;
    rid.read_bytes(|b| crate::base::cast(rid.dtype(), b, DType::Int64, want.bytes_mut()));
    let want = crate::base::buffer::try_copy(typed::<i64>(want.bytes()))?;
    let rows = stored.rows_now()?;
    let want = sparse::retained_rows(want, &rows.ids);
    let kept = sparse::retain(stored.row_bytes(), &rows.ids, &rows.data, &want)?;
    let data = if stored.dtype() == out.dtype() {
        kept
    } else {
        let mut cast = Buffer::zeroed(want.len() * out.row_bytes())?;
        crate::base::cast(stored.dtype(), kept.bytes(), out.dtype(), cast.bytes_mut());
        cast
    };
    out.set_rows_now(&want, data)
}
