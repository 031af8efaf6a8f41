//! The GPU backend: jobs whose arrays live on GPUs (`gpu(i)` contexts). Copies run on the
//! GPU as driver copies ([`copy`]); dense sums into GPU memory (the `device` store's merge
//! buffers) run as kernels on the sum's GPU ([`sum`]), and so do compressed sums whose values,
//! residuals and merge buffer share a GPU ([`compress`]), and so do row_sparse sums into a GPU
//! row_sparse array and row_sparse pulls between GPU row_sparse arrays ([`rsp`]); other
//! compressed sums, casts, other row_sparse work and sums into host memory (the `local` store: MXNet's CommCPU sums on the CPU too) are
//! staged through pinned host memory and run by the host backend ([`staged`]; a GPU
//! row_sparse array's rows move between its GPU and a host mirror by [`rows`]). Both keep
//! MXNet's association orders bit for bit. Every op completes from CUDA events through the
//! engine's `push_device`: workers never block on the GPU.

mod compress;
mod copy;
mod kept;
mod rows;
mod rsp;
mod staged;
mod sum;

use super::{Backend, ByteKernels, CompressedSumJob, CopyJob, RowSparsePull, SumJob, SumOrder};
use crate::error::Result;
use crate::ndarray::NDArray;
pub(crate) use copy::FUSED_COPY_MAX_BYTES;
pub(crate) use staged::host_readable;
use staged::{fail, Staging};
use std::sync::Arc;

/// A sum or copy op over at most this many arrays, ready when scheduled, enqueues its device
/// work on the calling thread ([`crate::engine::Engine::push_device`]'s `tiny`): a few driver
/// calls cost less than a worker's wake-up.
const TINY_OP_ARRAYS: usize = 16;

/// The key of `gpu(ordinal)`'s compute stream for the engine's stream ordering
/// ([`crate::engine::DeviceOp::stream`]).
fn compute_stream(ordinal: i32) -> u64 {
    ordinal as u64
}

/// Tells the engine that an op's work is all enqueued, when it all went to one device's
/// compute stream (ops waiting for it whose work goes there too need wait no longer).
fn signal_enqueued(signal: crate::engine::StreamSignal, stream: Option<i32>) {
    if let Some(ordinal) = stream {
        signal.enqueued(compute_stream(ordinal));
    }
}

/// The GPU backend. It does not name the host backend: the seam (`src/backend/mod.rs`) hands
/// it the backend that runs what it stages through host memory.
pub(crate) struct Gpu {
    /// Runs staged jobs on host mirrors, and the byte kernels.
    host: &'static dyn Backend,
}

impl Gpu {
    /// The GPU backend, staging through `host`.
    pub(crate) const fn new(host: &'static dyn Backend) -> Gpu {
        Gpu { host }
    }
}

/// Whether any of `arrays` lives in a GPU's memory, dense or row_sparse (the seam hands
/// host-context jobs touching one here).
pub(crate) fn touches_device<'a>(mut arrays: impl Iterator<Item = &'a NDArray>) -> bool {
    arrays.any(|a| a.on_device() || rows::is_device_row_sparse(a))
}

/// The profiler span of a GPU op (an `Op` row from the worker's enqueue to the event firing,
/// with its keys, bytes and context), closed where the op completes.
fn traced_span(name: &'static str, keys: usize, bytes: impl FnOnce() -> usize, shown: &NDArray) -> crate::profiler::Span {
    use crate::profiler::{Arg, Class};
    crate::profiler::span(Class::Op, name, || {
        vec![("keys", Arg::Int(keys as i64)), ("bytes", Arg::Int(bytes() as i64)), ("context", Arg::Text(shown.ctx().to_string()))]
    })
}

/// MXNet's rule for copies: the same dtype across devices; casts only within one device.
fn check_cross_device(src: &NDArray, dst: &NDArray) -> Result<()> {
    crate::ensure!(
        src.dtype() == dst.dtype() || src.ctx() == dst.ctx(),
        "Source and target must have the same data type when copying across devices ({} {} to {} {})",
        src.ctx(),
        src.dtype().name(),
        dst.ctx(),
        dst.dtype().name()
    );
    Ok(())
}

impl Gpu {
    fn staged_sum(&self, order: SumOrder, values: &[NDArray], batch: Vec<SumJob>, bytes: usize, priority: i32) -> Result<()> {
        let mut staging = Staging::kept();
        let mut host_values = Vec::new();
        let mut jobs = Vec::with_capacity(batch.len());
        for job in &batch {
            let start = host_values.len();
            for v in &values[job.values.clone()] {
                host_values.push(staging.read(v)?);
            }
            jobs.push(SumJob { values: start..host_values.len(), dst: staging.write(&job.dst, false)?, tail: None });
        }
        let host_values = Arc::new(host_values);
        staging.run(priority, || {
            self.host.sum(order, &host_values, jobs, bytes, priority);
        });
        Ok(())
    }

    fn staged_compressed_sum(&self, batch: Vec<CompressedSumJob>, bytes: usize, priority: i32) -> Result<()> {
        let mut staging = Staging::kept();
        let mut jobs = Vec::with_capacity(batch.len());
        for job in &batch {
            jobs.push(CompressedSumJob {
                values: job.values.iter().map(|v| staging.read(v)).collect::<Result<_>>()?,
                residuals: job.residuals.iter().map(|r| staging.write(r, true)).collect::<Result<_>>()?,
                dst: staging.write(&job.dst, false)?,
                compression: job.compression,
            });
        }
        staging.run(priority, || self.host.compressed_sum(jobs, bytes, priority));
        Ok(())
    }

    fn staged_copy_any(&self, src: &NDArray, dst: &NDArray, priority: i32) -> Result<()> {
        let mut staging = Staging::kept();
        let (s, d) = (staging.read(src)?, staging.write(dst, false)?);
        staging.run(priority, || self.host.copy_any(&s, &d, priority));
        Ok(())
    }
}

/// `batch` split into the jobs that satisfy `pred` and the others, in order. A batch is
/// usually all of one kind: it then moves whole rather than job by job into a growing vector.
fn split<T>(batch: Vec<T>, pred: impl Fn(&T) -> bool) -> (Vec<T>, Vec<T>) {
    if batch.iter().all(&pred) {
        (batch, Vec::new())
    } else {
        batch.into_iter().partition(pred)
    }
}

impl Backend for Gpu {
    fn name(&self) -> &'static str {
        "gpu"
    }

    fn sum(&self, order: SumOrder, values: &Arc<Vec<NDArray>>, batch: Vec<SumJob>, bytes: usize, priority: i32) -> Option<crate::engine::Ticket> {
        let (native, batch) = split(batch, |j| sum::is_native(values, j));
        // The ticket stands for every job of the batch: given only when one op runs them all.
        let ticket = if native.is_empty() { None } else { sum::push_sums(order, values, native, priority) };
        let ticket = ticket.filter(|_| batch.is_empty());
        let (native, batch): (Vec<SumJob>, Vec<SumJob>) = batch.into_iter().partition(|j| rsp::is_native_sum(values, j));
        if !native.is_empty() {
            rsp::push_sums(values, native, priority);
        }
        if batch.is_empty() {
            return ticket;
        }
        let dsts: Vec<NDArray> = batch.iter().map(|j| j.dst.clone()).collect();
        if let Err(e) = self.staged_sum(order, values, batch, bytes, priority) {
            fail(&dsts.iter().collect::<Vec<_>>(), e, priority);
        }
        None
    }

    fn compressed_sum(&self, batch: Vec<CompressedSumJob>, bytes: usize, priority: i32) {
        let (native, batch): (Vec<CompressedSumJob>, Vec<CompressedSumJob>) = batch.into_iter().partition(compress::is_native);
        if !native.is_empty() {
            compress::push_compressed(native, priority);
        }
        if batch.is_empty() {
            return;
        }
        let written: Vec<NDArray> =
            batch.iter().flat_map(|j| j.residuals.iter().chain(std::iter::once(&j.dst)).cloned()).collect();
        if let Err(e) = self.staged_compressed_sum(batch, bytes, priority) {
            fail(&written.iter().collect::<Vec<_>>(), e, priority);
        }
    }

    fn copy(&self, outs: &Arc<Vec<NDArray>>, batch: Vec<CopyJob>, _bytes: usize, priority: i32) {
        if batch.iter().all(|job| outs[job.dsts.clone()].iter().all(|dst| copy::is_driver_copy(&job.src, dst))) {
            return copy::push_pairs(copy::Pairs::shared(outs, batch), priority);
        }
        let mut pairs = Vec::new();
        for job in &batch {
            for dst in &outs[job.dsts.clone()] {
                if copy::is_driver_copy(&job.src, dst) {
                    pairs.push((job.src.clone(), dst.clone()));
                } else {
                    self.copy_any(&job.src, dst, priority);
                }
            }
        }
        copy::push_copies(pairs, priority);
    }

    fn row_sparse_pull(&self, pull: RowSparsePull, priority: i32) {
        if rsp::is_native_pull(&pull) {
            return rsp::push_pull(pull, priority);
        }
        let out = pull.out.clone();
        let mut staging = Staging::kept();
        let staged = staging.read(&pull.row_ids).and_then(|row_ids| {
            Ok(RowSparsePull { stored: staging.read(&pull.stored)?, out: staging.write(&pull.out, false)?, row_ids })
        });
        match staged {
            Ok(p) => staging.run(priority, || self.host.row_sparse_pull(p, priority)),
            Err(e) => fail(&[&out], e, priority),
        }
    }

    fn copy_any(&self, src: &NDArray, dst: &NDArray, priority: i32) {
        if let Err(e) = check_cross_device(src, dst) {
            return fail(&[dst], e, priority);
        }
        if copy::is_driver_copy(src, dst) {
            return copy::push_copies(vec![(src.clone(), dst.clone())], priority);
        }
        if !touches_device([src, dst].into_iter()) {
            return self.host.copy_any(src, dst, priority);
        }
        if let Err(e) = self.staged_copy_any(src, dst, priority) {
            fail(&[dst], e, priority);
        }
    }

    fn copy_sync(&self, src: &NDArray, dst: &NDArray) -> Result<()> {
        src.check_copy_to(dst)?;
        check_cross_device(src, dst)?;
        self.copy_any(src, dst, 0);
        dst.wait_to_read()
    }

    /// The host's: byte kernels read and write host memory, where GPU values are staged.
    fn byte_kernels(&self) -> &'static dyn ByteKernels {
        self.host.byte_kernels()
    }
}
