//! Handing a checked call's jobs to the backends in batches. Small keys are batched into one
//! op: the engine's per-op cost (registration, a worker wake-up) would otherwise dominate a
//! call that moves a few kilobytes per key. Big keys get a batch each, which the backend may
//! split over threads. A batch never mixes backends.

use crate::backend::{BackendKind, CompressedSumJob, CopyJob, SumJob, SumOrder};
use crate::engine::Ticket;
use crate::ndarray::NDArray;
use std::sync::Arc;

/// Bytes moved per batch of host work: big enough to amortise an op (registration, and often
/// a worker wake-up, which costs tens of microseconds on a VM), small enough that a call with
/// many keys still spreads over the workers.
const HOST_BATCH_BYTES: usize = 4 << 20;

/// Bytes moved per batch of GPU work: a GPU runs a device's work on one stream whichever op
/// enqueued it, so more ops only add what each costs between the GPU finishing one and
/// starting work that waits for it (its event noticed, the next op's work enqueued), and the
/// calling thread's cost per op; ResNet-50's parameters (102 MB a value) take two or three.
const GPU_BATCH_BYTES: usize = 256 << 20;

/// Keys per batch of GPU work: enqueueing a key's work costs its op's thread about a
/// microsecond, so a call of thousands of small keys is still spread over the workers.
const GPU_BATCH_JOBS: usize = 256;

/// A batch: its backend, the bytes it moves, its jobs.
type Batch<J> = (BackendKind, usize, Vec<J>);

/// The most bytes and jobs a batch on `kind` takes.
fn batch_limits(kind: BackendKind) -> (usize, usize) {
    match kind {
        BackendKind::Host => (HOST_BATCH_BYTES, usize::MAX),
        BackendKind::Gpu => (GPU_BATCH_BYTES, GPU_BATCH_JOBS),
    }
}

/// Splits jobs into batches moved on one backend ([`batch_limits`]), keeping order.
fn batches<J>(jobs: Vec<J>, bytes: impl Fn(&J) -> usize, kind: impl Fn(&J) -> BackendKind) -> Vec<Batch<J>> {
    let (mut out, mut open) = (Vec::new(), None);
    let total = jobs.len();
    for (i, job) in jobs.into_iter().enumerate() {
        let (b, k) = (bytes(&job), kind(&job));
        out.extend(add_to(&mut open, job, b, k, total - i));
    }
    out.extend(open);
    out
}

/// Adds a job moving `bytes` on `kind` to the open batch, or, where it does not fit there,
/// opens a new batch with it and returns the one it closed. `left` counts this job and those
/// still to come: a new batch is sized for as many of them as it can take, since growing a
/// vector of hundreds of jobs one doubling at a time copies it again at each step (a call of
/// small keys did so for every batch).
fn add_to<J>(open: &mut Option<Batch<J>>, job: J, bytes: usize, kind: BackendKind, left: usize) -> Option<Batch<J>> {
    let (max_bytes, max_jobs) = batch_limits(kind);
    match open {
        Some((k, size, batch)) if *k == kind && *size + bytes <= max_bytes && batch.len() < max_jobs => {
            batch.push(job);
            *size += bytes;
            None
        }
        _ => {
            let fits = max_jobs.min(max_bytes / bytes.max(1)).min(left).max(1);
            let mut batch = Vec::with_capacity(fits);
            batch.push(job);
            open.replace((kind, bytes, batch))
        }
    }
}

/// Sums handed to the backends batch by batch while a call's jobs are still being made: a
/// batch goes as soon as the next job does not fit it ([`batches`]' batches, in order), so
/// the first op starts while the calling thread makes the rest.
pub(crate) struct SumBatches {
    order: SumOrder,
    values: Arc<Vec<NDArray>>,
    priority: i32,
    open: Option<Batch<SumJob>>,
    /// Each job's op's ticket, in job order, where its backend gave one.
    tickets: Vec<Option<Ticket>>,
    /// Jobs the caller said it may add and has not added yet (sizes each batch's vector).
    left: usize,
}

impl SumBatches {
    /// Batches of sums over `values`, shared with the ops (not cloned: cloning views touches
    /// refcounts the workers use too). `most` is how many jobs the caller may add: vectors are
    /// sized from it, not grown.
    pub(crate) fn new(order: SumOrder, values: Arc<Vec<NDArray>>, priority: i32, most: usize) -> SumBatches {
        SumBatches { order, values, priority, open: None, tickets: Vec::with_capacity(most), left: most }
    }

    /// The values the jobs index.
    pub(crate) fn values(&self) -> &[NDArray] {
        &self.values
    }

    /// Adds a job, handing the open batch to its backend first when the job does not fit it.
    pub(crate) fn add(&mut self, job: SumJob) {
        let (bytes, kind) = (job.dst.data_byte_len() * (job.values.len() + 1), BackendKind::of(job.dst.ctx()));
        let left = self.left.max(1);
        self.left = left - 1;
        if let Some(closed) = add_to(&mut self.open, job, bytes, kind, left) {
            self.submit(closed);
        }
    }

    fn submit(&mut self, (kind, bytes, batch): Batch<SumJob>) {
        let n = batch.len();
        let ticket = kind.backend().sum(self.order, &self.values, batch, bytes, self.priority);
        self.tickets.extend(std::iter::repeat_n(ticket, n));
    }

    /// Hands the last batch on; returns each job's ticket (in job order), where its backend
    /// gave one.
    pub(crate) fn finish(mut self) -> Vec<Option<Ticket>> {
        if let Some(last) = self.open.take() {
            self.submit(last);
        }
        self.tickets
    }
}

/// Hands compressed sums to the backends and returns at once.
pub(crate) fn compressed_sums(jobs: Vec<CompressedSumJob>, priority: i32) {
    let sized = |j: &CompressedSumJob| j.dst.data_byte_len() * (2 * j.values.len() + 1);
    for (kind, bytes, batch) in batches(jobs, sized, |j| BackendKind::of(j.dst.ctx())) {
        kind.backend().compressed_sum(batch, bytes, priority);
    }
}

/// Hands the copies into `outs` to the backends and returns at once.
pub(crate) fn copies(outs: Arc<Vec<NDArray>>, jobs: Vec<CopyJob>, priority: i32) {
    let sized = |j: &CopyJob| j.src.data_byte_len() * (j.dsts.len() + 1);
    let kind = |j: &CopyJob| BackendKind::of(outs.get(j.dsts.start).map_or(j.src.ctx(), NDArray::ctx));
    for (kind, bytes, batch) in batches(jobs, sized, kind) {
        kind.backend().copy(&outs, batch, bytes, priority);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_keep_order_and_stay_under_the_size() {
        let jobs: Vec<usize> = vec![1 << 20, 2 << 20, 1 << 20, 8 << 20, 4];
        let got = batches(jobs, |j| *j, |_| BackendKind::Host);
        let sizes: Vec<Vec<usize>> = got.into_iter().map(|(_, _, b)| b).collect();
        assert_eq!(sizes, vec![vec![1 << 20, 2 << 20, 1 << 20], vec![8 << 20], vec![4]]);
        let jobs: Vec<usize> = vec![1 << 20, 8 << 20, 60 << 20, 4, 250 << 20, 1];
        let got = batches(jobs, |j| *j, |_| BackendKind::Gpu);
        let sizes: Vec<Vec<usize>> = got.into_iter().map(|(_, _, b)| b).collect();
        assert_eq!(sizes, vec![vec![1 << 20, 8 << 20, 60 << 20, 4], vec![250 << 20, 1]], "GPU batches are bigger");
        let got = batches(vec![4096usize; 600], |j| *j, |_| BackendKind::Gpu);
        let lens: Vec<usize> = got.iter().map(|(_, _, b)| b.len()).collect();
        assert_eq!(lens, vec![256, 256, 88], "GPU batches take at most GPU_BATCH_JOBS keys");
        let room: Vec<usize> = got.iter().map(|(_, _, b)| b.capacity()).collect();
        assert_eq!(room, lens, "each batch is sized for the jobs left that fit it, not grown");
        let got = batches(vec![1usize << 20; 10], |j| *j, |_| BackendKind::Host);
        let room: Vec<(usize, usize)> = got.iter().map(|(_, _, b)| (b.len(), b.capacity())).collect();
        assert_eq!(room, vec![(4, 4), (4, 4), (2, 2)], "host batches: as many as fit its bytes, at most the jobs left");
    }
}
