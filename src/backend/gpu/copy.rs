//! Copies with a GPU on one side or both, as driver copies: device to device on the
//! destination's compute stream (peer copies between devices), host to device and device to
//! host on their own streams. Pinned host arrays are copied directly; pageable host memory
//! goes through the pinned staging pool (a source is staged on the worker, a destination is
//! filled from its staging buffer when the copy's event fired). One engine op per batch,
//! completed from the event: the worker never waits for the GPU.
//!
//! Copies within one GPU (a pull's outputs beside their merge buffer) are kernel launches,
//! each entry of a table a key of one source: the small ones in one launch of `fused_copy`
//! per device (its table in the launch's parameters when it fits, else kept with the first
//! destination), bigger ones (keys whose pull did not join their push) in launches of
//! `fused_copy_by_value`, about seventy a launch. A driver copy costs the enqueueing thread
//! microseconds, so a pull of many keys would otherwise spend its time enqueueing copies
//! rather than moving bytes.

use super::kept::{self, Use};
use crate::backend::CopyJob;
use crate::base::DType;
use crate::engine::{engine, DeviceOp, OpDone, Var};
use crate::error::{Error, Result};
use crate::gpu::fused::{SmallKey, Sources};
use crate::gpu::sums::{self, SMALL_KEY_ELEMS};
use crate::gpu::{PinnedMemory, Place, Queue};
use crate::ndarray::NDArray;
use crate::reduce::SumOrder;
use std::sync::Arc;

/// Whether `src` to `dst` is a plain GPU copy: dense, same dtype, a GPU on a side.
pub(super) fn is_driver_copy(src: &NDArray, dst: &NDArray) -> bool {
    src.dtype() == dst.dtype()
        && src.stype() == crate::ndarray::StorageType::Default
        && dst.stype() == crate::ndarray::StorageType::Default
        && (src.on_device() || dst.on_device())
}

/// An op's copies, `outs[i] = job.src` for each job and each `i` of its `dsts`: a pull's
/// outputs and stored values as the store's call shares them, so that the calling thread
/// touches no array's reference count per copy (a count the completion thread then releases
/// would move its line between the two threads' cores for every array).
pub(super) struct Pairs {
    outs: Arc<Vec<NDArray>>,
    jobs: Vec<CopyJob>,
}

impl Pairs {
    /// Pairs of their own, each `(src, dst)`.
    pub(super) fn owned(pairs: Vec<(NDArray, NDArray)>) -> Pairs {
        let (mut outs, mut jobs) = (Vec::with_capacity(pairs.len()), Vec::with_capacity(pairs.len()));
        for (i, (src, dst)) in pairs.into_iter().enumerate() {
            outs.push(dst);
            jobs.push(CopyJob { src, dsts: i..i + 1 });
        }
        Pairs { outs: Arc::new(outs), jobs }
    }

    /// A pull's copies: every pair a driver copy (see [`is_driver_copy`]).
    pub(super) fn shared(outs: &Arc<Vec<NDArray>>, jobs: Vec<CopyJob>) -> Pairs {
        Pairs { outs: Arc::clone(outs), jobs }
    }

    fn iter(&self) -> impl Iterator<Item = (&NDArray, &NDArray)> {
        self.jobs.iter().flat_map(move |j| self.outs[j.dsts.clone()].iter().map(move |d| (&j.src, d)))
    }

    fn len(&self) -> usize {
        self.jobs.iter().map(|j| j.dsts.len()).sum()
    }
}

/// Schedules `dst = src` for every pair (each a driver copy, see [`is_driver_copy`]), as one op.
pub(super) fn push_copies(pairs: Vec<(NDArray, NDArray)>, priority: i32) {
    push_pairs(Pairs::owned(pairs), priority);
}

/// Schedules every copy of `pairs` (each a driver copy) as one op.
pub(super) fn push_pairs(pairs: Pairs, priority: i32) {
    if pairs.jobs.iter().all(|j| j.dsts.is_empty()) {
        return;
    }
    // Shared with the op, not cloned (see [`Pairs`]).
    let pairs = Arc::new(pairs);
    // A pull's pairs come grouped by source (a key's outputs): each source is read once.
    let mut reads: Vec<Var> = Vec::with_capacity(pairs.jobs.len());
    for job in pairs.jobs.iter().filter(|j| !j.dsts.is_empty()) {
        if reads.last().is_none_or(|last| *last != job.src.var()) {
            reads.push(job.src.var());
        }
    }
    // Sized up front (see `sum::push_sums`).
    let mut writes: Vec<Var> = Vec::with_capacity(pairs.len());
    writes.extend(pairs.iter().map(|(_, d)| d.var()));
    let pairs_for_op = Arc::clone(&pairs);
    // A tiny op of copies within one GPU is ordered by that GPU's stream: it need not wait
    // for the op writing its sources to finish (its table goes by value: no kept memory that
    // work still in flight reads).
    let tiny = writes.len() <= super::TINY_OP_ARRAYS;
    let stream = if tiny { one_device(pairs.iter()).map(super::compute_stream) } else { None };
    let how = DeviceOp { tiny, extensible: false, stream };
    engine().push_device(&reads, &writes, priority, how, move |_, done| run_copies(pairs_for_op, done));
}

/// The device whose compute stream all of `pairs` go to, when they are all copies within it
/// (kernel launches there: [`enqueue_copies`]).
fn one_device<'a>(pairs: impl IntoIterator<Item = (&'a NDArray, &'a NDArray)>) -> Option<i32> {
    let mut device = None;
    for (src, dst) in pairs {
        let (ordinal, _) = fusable_copy(src, dst)?;
        if *device.get_or_insert(ordinal) != ordinal {
            return None;
        }
    }
    device
}

/// Pageable destinations and the pinned buffers they are filled from at completion.
pub(super) type Landings = Vec<(PinnedMemory, NDArray)>;

fn run_copies(pairs: Arc<Pairs>, done: OpDone) {
    // The op's span runs until its event fired: the trace shows the GPU time.
    // [`push_pairs`] makes no op without a copy: there is a first output to show.
    let bytes = || pairs.iter().map(|(s, _)| s.data_byte_len()).sum();
    let span = pairs.iter().next().map(|(_, shown)| super::traced_span("gpu_copy", pairs.len(), bytes, shown));
    let mut q = Queue::new();
    let landings = enqueue_copies(&mut q, pairs.iter(), pairs.len());
    let (signal, stream) = (done.stream_signal(), q.only_compute_stream());
    q.finish(
        Box::new(move |outcome| {
            let landed = outcome.map_err(Error::new).and_then(|()| land(&landings));
            // Recorded before the op completes, so that a dump after a wait has it.
            drop(span);
            done.finish(landed);
        }),
        Box::new(pairs),
    );
    super::signal_enqueued(signal, stream);
}

/// Enqueues `dst = src` for every pair (each a driver copy, see [`is_driver_copy`]): small ones
/// within a GPU in one fused launch per device, the others as driver copies. Returns the
/// pageable destinations to fill from their staging buffers once the work has finished.
/// `count`: how many pairs there are (each device's fused table is sized for them).
pub(super) fn enqueue_copies<'a>(q: &mut Queue, pairs: impl IntoIterator<Item = (&'a NDArray, &'a NDArray)>, count: usize) -> Landings {
    let mut landings = Landings::new();
    // Per device: the small copies within it, and the first one's destination (keeping the table).
    let mut fused: Vec<(i32, Vec<SmallKey>, &'a NDArray)> = Vec::new();
    // Per device: the bigger copies within it (a pull's outputs of keys whose pull did not
    // join the push), their tables passed by value: whether a key joined depends on timing,
    // and a kept table sized by it would make a steady loop allocate.
    let mut bigger: Vec<(i32, Vec<SmallKey>)> = Vec::new();
    for (src, dst) in pairs {
        match fusable_copy(src, dst) {
            Some((ordinal, key)) if (key.n as usize) * key.dtype.size() <= FUSED_COPY_MAX_BYTES => {
                match fused.iter_mut().find(|(o, _, _)| *o == ordinal) {
                    Some((_, keys, _)) => keys.push(key),
                    None => {
                        let mut keys = Vec::with_capacity(count);
                        keys.push(key);
                        fused.push((ordinal, keys, dst));
                    }
                }
            }
            Some((ordinal, key)) => match bigger.iter_mut().find(|(o, _)| *o == ordinal) {
                Some((_, keys)) => keys.push(key),
                None => bigger.push((ordinal, vec![key])),
            },
            None => {
                if let Err(e) = enqueue(q, src, dst, &mut landings) {
                    q.fail(e.message().to_string());
                    break;
                }
            }
        }
    }
    for (ordinal, keys, first) in &fused {
        // The table in the launch's parameters when it fits, else kept with the first
        // destination: a steady loop allocates nothing.
        sums::fused_copy(q, *ordinal, keys, |q: &mut Queue, table: &[u8]| kept::table(q, first, Use::CopyTable, *ordinal, table, 0));
    }
    for (ordinal, keys) in &bigger {
        sums::fused_copy_by_value(q, *ordinal, keys);
    }
    landings
}

/// The biggest copy within a GPU made in the call's one fused launch per device (bigger ones
/// go into launches of their own, their tables passed by value).
pub(crate) const FUSED_COPY_MAX_BYTES: usize = SMALL_KEY_ELEMS as usize * 4;

/// `dst = src` as an entry of a fused launch on their GPU, when both lie on the same GPU: a
/// sum of one source, in the widest integer element that the length and both addresses
/// allow (bytes are moved as they are, whatever the dtype).
fn fusable_copy(src: &NDArray, dst: &NDArray) -> Option<(i32, SmallKey)> {
    let (from, to) = (src.device_ptr()?, dst.device_ptr()?);
    let bytes = src.data_byte_len() as u64;
    if from.ordinal != to.ordinal || bytes != dst.data_byte_len() as u64 || bytes == 0 {
        return None;
    }
    let dtype = [DType::Int64, DType::Int32, DType::Uint8]
        .into_iter()
        .find(|t| {
            let width = t.size() as u64;
            bytes.is_multiple_of(width) && from.addr % width == 0 && to.addr % width == 0
        })
        .unwrap_or(DType::Uint8);
    let n = bytes / dtype.size() as u64;
    Some((to.ordinal, SmallKey { dst: to.addr, srcs: Sources::One(from.addr), n, dtype, order: SumOrder::Serial }))
}

/// Where a GPU copy reads `src`: its own device or pinned memory, or (pageable host memory)
/// a pinned staging buffer filled now and held by the queue until the work is done.
pub(super) fn source_place(q: &mut Queue, src: &NDArray) -> Result<Place> {
    if let Some(place) = src.copy_place() {
        return Ok(place);
    }
    let mut buffer = PinnedMemory::staging(src.data_byte_len()).map_err(Error::new)?;
    src.read_bytes(|b| buffer.bytes_mut().copy_from_slice(b));
    let place = Place::Host(buffer.at(0));
    q.hold(Box::new(buffer));
    Ok(place)
}

/// Fills pageable destinations from their staging buffers.
pub(super) fn land(landings: &[(PinnedMemory, NDArray)]) -> Result<()> {
    for (staged, dst) in landings {
        dst.write_bytes(|d| d.copy_from_slice(&staged.bytes()[..d.len()]));
    }
    Ok(())
}

fn enqueue(q: &mut Queue, src: &NDArray, dst: &NDArray, landings: &mut Landings) -> Result<()> {
    let bytes = src.data_byte_len();
    if !src.on_device() && !dst.on_device() {
        // Never queued: the backend runs host-to-host copies on the host backend.
        crate::bail!("internal error: a host to host copy ({src:?} to {dst:?}) was queued on a GPU");
    }
    let from = source_place(q, src)?;
    let to = match dst.copy_place() {
        Some(place) => place,
        None => {
            let buffer = PinnedMemory::staging(bytes).map_err(Error::new)?;
            let place = Place::Host(buffer.at(0));
            landings.push((buffer, dst.clone()));
            place
        }
    };
    q.copy(to, from, bytes);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::Pairs;
    use crate::backend::CopyJob;
    use crate::ndarray::{Context, DType, NDArray};
    use std::sync::Arc;

    fn arrays(n: usize) -> Vec<NDArray> {
        (0..n).map(|_| NDArray::zeros(&[2], Context::cpu(0), DType::Float32).unwrap()).collect()
    }

    /// Which of `srcs` and `outs` each pair is, by position.
    fn positions(pairs: &Pairs, srcs: &[NDArray], outs: &[NDArray]) -> Vec<(usize, usize)> {
        let at = |set: &[NDArray], a: &NDArray| set.iter().position(|b| b.same_chunk(a)).unwrap();
        pairs.iter().map(|(s, d)| (at(srcs, s), at(outs, d))).collect()
    }

    #[test]
    fn shared_pairs_are_each_jobs_outputs_in_order() {
        let (srcs, outs) = (arrays(3), Arc::new(arrays(6)));
        // Job 1 has no output; output 5 belongs to no job of this batch (another batch's).
        let jobs = vec![
            CopyJob { src: srcs[0].clone(), dsts: 0..2 },
            CopyJob { src: srcs[1].clone(), dsts: 2..2 },
            CopyJob { src: srcs[2].clone(), dsts: 2..5 },
        ];
        let pairs = Pairs::shared(&outs, jobs);
        assert_eq!(pairs.len(), 5);
        assert_eq!(positions(&pairs, &srcs, &outs), [(0, 0), (0, 1), (2, 2), (2, 3), (2, 4)]);
    }

    #[test]
    fn owned_pairs_keep_their_order() {
        let (srcs, outs) = (arrays(2), arrays(3));
        let given = vec![(srcs[1].clone(), outs[2].clone()), (srcs[0].clone(), outs[0].clone()), (srcs[1].clone(), outs[1].clone())];
        let pairs = Pairs::owned(given);
        assert_eq!(pairs.len(), 3);
        assert_eq!(positions(&pairs, &srcs, &outs), [(1, 2), (0, 0), (1, 1)]);
    }
}
