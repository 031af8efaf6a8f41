//! Row_sparse arrays on GPUs hold their row ids and values in the GPU's memory; the host
//! backend's row_sparse kernels run on host mirrors of them. These ops move the rows between
//! a GPU array and its mirror as driver copies through pinned staging buffers, completed from
//! the copies' events (the worker never waits for the GPU): a download fills the mirror when
//! the copies finished; an upload allocates the rows' new device memory, copies into it and
//! installs it in the GPU array when the copies finished (a failure leaves the array as it
//! was and is reported by the next wait on it).

use crate::engine::{DeviceOp, engine, OpDone, Var};
use crate::error::{Error, Result};
use crate::gpu::{DeviceMemory, PinnedMemory, Place, Queue};
use crate::ndarray::{Context, DType, DeviceType, Memory, NDArray, StorageType};

/// Whether `a` is a row_sparse array whose rows live in a GPU's memory.
pub(super) fn is_device_row_sparse(a: &NDArray) -> bool {
    a.stype() == StorageType::RowSparse && a.ctx().dev_type == DeviceType::Gpu
}

/// An empty row_sparse array on the host like `a`, for the host backend to read or write.
pub(super) fn host_mirror(a: &NDArray) -> Result<NDArray> {
    NDArray::empty_row_sparse(a.shape(), Context::cpu(0), a.dtype())
}

/// A pinned staging buffer of `len` bytes.
fn staging(len: usize) -> Result<PinnedMemory> {
    PinnedMemory::staging(len).map_err(Error::new)
}

/// What one download lands: its mirror, and the staged ids and values.
struct Landing {
    mirror: NDArray,
    id_dtype: DType,
    rows: usize,
    ids: PinnedMemory,
    values: PinnedMemory,
}

/// Schedules `mirror = gpu` for every `(gpu, mirror)` pair, as one op.
pub(super) fn push_downloads(pairs: Vec<(NDArray, NDArray)>, priority: i32) {
    push_copies(pairs, priority, Side::Source, enqueue_download, |landings| landings.into_iter().try_for_each(land));
}

fn enqueue_download(q: &mut Queue, src: &NDArray, mirror: &NDArray) -> Result<Landing> {
    let Some(parts) = src.device_rows() else {
        crate::bail!("internal error: {src:?} does not hold its rows in a GPU's memory");
    };
    let (ids, values) = (staging(parts.rows * parts.id_dtype.size())?, staging(parts.rows * src.row_bytes())?);
    q.copy(Place::Host(ids.at(0)), Place::Device(parts.ids), ids.len());
    q.copy(Place::Host(values.at(0)), Place::Device(parts.values), values.len());
    Ok(Landing { mirror: mirror.clone(), id_dtype: parts.id_dtype, rows: parts.rows, ids, values })
}

/// Fills a mirror from its staged rows (on the completion thread, after the copies).
fn land(l: Landing) -> Result<()> {
    let ids = crate::ndarray::row_ids_of(l.id_dtype, l.ids.bytes(), l.rows)?;
    let mut values = crate::base::buffer::Buffer::zeroed(l.values.len())?;
    values.bytes_mut().copy_from_slice(l.values.bytes());
    l.mirror.set_rows_now(&ids, values)
}

/// What one upload installs: the GPU array and its new device memory (also what a native
/// row_sparse sum or pull installs, `super::rsp`).
pub(super) struct Install {
    pub(super) dst: NDArray,
    pub(super) id_dtype: DType,
    pub(super) rows: usize,
    pub(super) ids: DeviceMemory,
    pub(super) values: DeviceMemory,
}

/// Schedules `gpu = mirror` for every `(mirror, gpu)` pair, as one op.
pub(super) fn push_uploads(pairs: Vec<(NDArray, NDArray)>, priority: i32) {
    push_copies(pairs, priority, Side::Destination, enqueue_upload, |installs| {
        for i in installs {
            i.dst.install_rows(i.id_dtype, i.rows, Memory::Device(i.ids), Memory::Device(i.values));
        }
        Ok(())
    });
}

/// Which array of a pair the op's profiler row shows: the GPU one.
enum Side {
    Source,
    Destination,
}

/// One op reading every pair's first array and writing its second: `enqueue` schedules each
/// pair's copies, and `then` gets what they returned once all the copies finished.
fn push_copies<T: Send + 'static>(
    pairs: Vec<(NDArray, NDArray)>,
    priority: i32,
    shown: Side,
    enqueue: fn(&mut Queue, &NDArray, &NDArray) -> Result<T>,
    then: impl FnOnce(Vec<T>) -> Result<()> + Send + 'static,
) {
    if pairs.is_empty() {
        return;
    }
    let held = pairs.clone();
    let reads: Vec<Var> = held.iter().map(|(s, _)| s.var()).collect();
    let writes: Vec<Var> = held.iter().map(|(_, d)| d.var()).collect();
    engine().push_device(&reads, &writes, priority, DeviceOp::default(), move |_env, done| {
        let gpu_side = |(s, d): &(NDArray, NDArray)| match shown {
            Side::Source => s.clone(),
            Side::Destination => d.clone(),
        };
        let bytes = || pairs.iter().map(|(s, _)| s.data_byte_len()).sum();
        let span = super::traced_span("gpu_copy", pairs.len(), bytes, &gpu_side(&pairs[0]));
        let mut q = Queue::new();
        let staged = enqueue_all(&mut q, &pairs, enqueue);
        finish(q, done, pairs, span, move || then(staged));
    });
}

fn enqueue_upload(q: &mut Queue, mirror: &NDArray, dst: &NDArray) -> Result<Install> {
    let rows = mirror.rows_now()?;
    let id_dtype = dst.row_id_dtype();
    let ordinal = dst.ctx().dev_id;
    let mut staged_ids = staging(rows.ids.len() * id_dtype.size())?;
    crate::base::cast(DType::Int64, bytemuck::cast_slice(&rows.ids), id_dtype, staged_ids.bytes_mut());
    let mut staged_values = staging(rows.data.len())?;
    staged_values.bytes_mut().copy_from_slice(&rows.data);
    let ids = DeviceMemory::zeroed(ordinal, staged_ids.len()).map_err(Error::new)?;
    let values = DeviceMemory::zeroed(ordinal, staged_values.len()).map_err(Error::new)?;
    q.copy(Place::Device(ids.ptr()), Place::Host(staged_ids.at(0)), staged_ids.len());
    q.copy(Place::Device(values.ptr()), Place::Host(staged_values.at(0)), staged_values.len());
    q.hold(Box::new((staged_ids, staged_values)));
    Ok(Install { dst: dst.clone(), id_dtype, rows: rows.ids.len(), ids, values })
}

/// Enqueues every pair's copies; after a failure the queue is failed (the op reports it) and
/// what the copies already enqueued use is held by the queue until they finished.
fn enqueue_all<T: Send + 'static>(
    q: &mut Queue,
    pairs: &[(NDArray, NDArray)],
    enqueue: impl Fn(&mut Queue, &NDArray, &NDArray) -> Result<T>,
) -> Vec<T> {
    let mut out = Vec::with_capacity(pairs.len());
    for (a, b) in pairs {
        match enqueue(q, a, b) {
            Ok(t) => out.push(t),
            Err(e) => {
                q.fail(e.message().to_string());
                q.hold(Box::new(out));
                return Vec::new();
            }
        }
    }
    out
}

/// Completes the op once the queue's copies finished: `then` runs (on the completion thread)
/// only when they succeeded.
fn finish(
    q: Queue,
    done: OpDone,
    held: Vec<(NDArray, NDArray)>,
    span: crate::profiler::Span,
    then: impl FnOnce() -> Result<()> + Send + 'static,
) {
    q.finish(
        Box::new(move |outcome| {
            done.finish(outcome.map_err(Error::new).and_then(|()| then()));
            drop(span);
        }),
        Box::new(held),
    );
}
