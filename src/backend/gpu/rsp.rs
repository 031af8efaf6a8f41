//! Row_sparse sums and pulls into GPU row_sparse arrays, run as kernels on the destination's
//! GPU (`kernels/row_sparse.cu`). Only row ids come to the host: a first op downloads the
//! row ids of the GPU arrays read (driver copies, completed from their events); a second op,
//! ordered after it by the engine (both write the destinations), plans on the host where each
//! row goes — [`sparse::plan_rows`] for sums, [`sparse::retain_positions`] for pulls, the host
//! backend's own plans — finds the destination's rows on its GPU ([`Target`]: its own memory
//! when it holds as many rows already, else new memory), brings the values there (peer copies
//! from other GPUs into buffers kept with the destination, uploads of host values), launches
//! `rsp_accumulate_<dtype>` once per input in order (a sum) or `rsp_gather` (a pull), uploads
//! the new ids, and installs new memory into the destination when the events fired. Results
//! are the host backend's bit for bit; a failure is reported by the next wait on the
//! destination. Workers never wait for the GPU. The tables, copies and pinned staging buffers
//! are kept with the destination ([`super::kept`]): with the same number of rows each time (a
//! steady loop's), a sum or pull allocates nothing.

use super::kept::{self, SharedPinned, Use};
use super::rows::is_device_row_sparse;
use crate::backend::{RowSparsePull, SumJob};
use crate::engine::{DeviceOp, engine, OpDone, Var};
use crate::error::{Error, Result};
use crate::gpu::sums::{rsp_accumulate, rsp_gather};
use crate::gpu::{DeviceMemory, DevicePtr, PinnedMemory, Place, Queue};
use crate::ndarray::{check_row_ids, row_ids_of, DType, Memory, NDArray, StorageType};
use crate::reduce::sparse;
use parking_lot::Mutex;
use std::sync::Arc;

/// Row ids the first op read, per source in order, for the second.
type Slot = Arc<Mutex<Option<Vec<Vec<i64>>>>>;

/// Whether the GPU sums `job` itself: row_sparse values of the dtype of a row_sparse
/// destination on a GPU (the values on GPUs or the host), none sharing its memory.
pub(super) fn is_native_sum(values: &[NDArray], job: &SumJob) -> bool {
    let dst = &job.dst;
    is_device_row_sparse(dst)
        && dst.dtype() != DType::Bool
        && values[job.values.clone()]
            .iter()
            .all(|v| v.stype() == StorageType::RowSparse && v.dtype() == dst.dtype() && !v.same_chunk(dst))
}

/// Whether the GPU runs `pull` itself: a stored GPU row_sparse value into a GPU row_sparse
/// output of its dtype, the row ids dense (on a GPU or the host).
pub(super) fn is_native_pull(pull: &RowSparsePull) -> bool {
    is_device_row_sparse(&pull.stored)
        && is_device_row_sparse(&pull.out)
        && pull.stored.dtype() == pull.out.dtype()
        && !pull.stored.same_chunk(&pull.out)
        && pull.row_ids.stype() == StorageType::Default
}

fn staging(len: usize) -> Result<PinnedMemory> {
    PinnedMemory::staging(len).map_err(Error::new)
}

/// What the first op downloads of one source.
struct IdLanding {
    staged: Option<SharedPinned>,
    dtype: DType,
    n: usize,
    /// A row_sparse source's row count: its ids are checked against it (malformed ids read
    /// as no rows, as [`NDArray::rows_now`] reads them).
    check_rows: Option<usize>,
}

/// Enqueues the download of `src`'s ids into the pinned buffer kept with `owner` (an array the
/// op writes) for source `position`.
fn enqueue_ids(q: &mut Queue, src: &NDArray, owner: &NDArray, position: usize) -> Result<IdLanding> {
    let (from, dtype, n, check_rows) = if src.stype() == StorageType::RowSparse {
        let Some(parts) = src.device_rows() else {
            crate::bail!("internal error: {src:?} does not hold its rows in a GPU's memory");
        };
        (parts.ids, parts.id_dtype, parts.rows, Some(src.shape().first().copied().unwrap_or(0)))
    } else {
        let Some(ptr) = src.device_ptr() else {
            crate::bail!("internal error: {src:?} is not in a GPU's memory");
        };
        (ptr, src.dtype(), src.size(), None)
    };
    let bytes = n * dtype.size();
    if bytes == 0 {
        return Ok(IdLanding { staged: None, dtype, n: 0, check_rows });
    }
    let staged = kept::pinned(owner, Use::IdLanding(position), bytes)?;
    let at = staged.lock().at(0);
    q.copy(Place::Host(at), Place::Device(from), bytes);
    Ok(IdLanding { staged: Some(staged), dtype, n, check_rows })
}

fn land_ids(l: IdLanding) -> Result<Vec<i64>> {
    let Some(staged) = l.staged else { return Ok(Vec::new()) };
    let ids = row_ids_of(l.dtype, &staged.lock().bytes()[..l.n * l.dtype.size()], l.n)?;
    match l.check_rows {
        Some(rows) if check_row_ids(&ids, rows).is_err() => Ok(Vec::new()),
        _ => Ok(ids),
    }
}

/// Schedules the download of the ids of `sources` (GPU row_sparse arrays' row ids, or dense
/// GPU arrays of ids) as an op writing `writes`; the ids land in the returned slot, through
/// pinned buffers kept with `owners` (for each source, the array of `writes` its job writes,
/// and the source's position in that job).
fn push_id_downloads(sources: Vec<NDArray>, owners: Vec<(NDArray, usize)>, writes: &[NDArray], priority: i32) -> Slot {
    let slot: Slot = Arc::new(Mutex::new(None));
    let filled = Arc::clone(&slot);
    let held = (sources.clone(), writes.to_vec());
    let reads: Vec<Var> = held.0.iter().map(NDArray::var).collect();
    let write_vars: Vec<Var> = held.1.iter().map(NDArray::var).collect();
    let written = writes.to_vec();
    engine().push_device(&reads, &write_vars, priority, DeviceOp::default(), move |_, done| {
        let bytes = || sources.iter().filter_map(NDArray::device_rows).map(|p| p.rows * p.id_dtype.size()).sum();
        let span = super::traced_span("gpu_row_ids", sources.len(), bytes, &sources[0]);
        let mut q = Queue::new();
        let mut landings = Vec::with_capacity(sources.len());
        for (s, (owner, position)) in sources.iter().zip(&owners) {
            match enqueue_ids(&mut q, s, owner, *position) {
                Ok(l) => landings.push(l),
                Err(e) => {
                    q.fail(e.message().to_string());
                    break;
                }
            }
        }
        q.finish(
            Box::new(move |outcome| {
                let landed = outcome
                    .map_err(Error::new)
                    .and_then(|()| landings.into_iter().map(land_ids).collect::<Result<Vec<_>>>())
                    .map(|ids| *filled.lock() = Some(ids));
                drop(span);
                done.finish(landed);
            }),
            Box::new((sources, written)),
        );
    });
    slot
}

/// The ids the first op read (none when it had nothing to read).
fn take_ids(slot: Option<Slot>) -> Result<Vec<Vec<i64>>> {
    match slot {
        None => Ok(Vec::new()),
        Some(s) => s.lock().take().ok_or_else(|| Error::new("the row ids of a row_sparse op's GPU arrays could not be read")),
    }
}

/// Where a row_sparse sum or pull on a GPU writes its destination's rows. When the
/// destination already holds as many rows (a steady loop's), in its own memory: the new ids
/// are uploaded over the old and every value byte is written (each row's first contributor
/// copied, a gather writing zeros for rows not stored), so nothing is allocated and the values
/// are those fresh memory would get (a failure then leaves the destination partly written, and
/// reported by the next wait on it). Otherwise in new memory on its GPU, installed when the
/// events fired (a failure leaves the destination as it was).
struct Target {
    dst: NDArray,
    id_dtype: DType,
    rows: usize,
    values: DevicePtr,
    /// New memory (ids, values) to install; `None` when written in place.
    fresh: Option<(DeviceMemory, DeviceMemory)>,
}

impl Target {
    /// Where `dst`'s rows `ids` go, the ids' upload enqueued.
    fn new(q: &mut Queue, dst: &NDArray, ids: &[i64]) -> Result<Target> {
        let ordinal = dst.ctx().dev_id;
        let id_dtype = dst.row_id_dtype();
        let id_len = ids.len() * id_dtype.size();
        let in_place = dst.device_rows().filter(|r| !ids.is_empty() && r.rows == ids.len() && r.id_dtype == id_dtype && r.ids.ordinal == ordinal);
        let (ids_at, values, fresh) = match in_place {
            Some(r) => (r.ids, r.values, None),
            None => {
                let values = DeviceMemory::zeroed(ordinal, ids.len() * dst.row_bytes()).map_err(Error::new)?;
                let id_mem = DeviceMemory::zeroed(ordinal, id_len).map_err(Error::new)?;
                (id_mem.ptr(), values.ptr(), Some((id_mem, values)))
            }
        };
        if !ids.is_empty() {
            let staged = kept::pinned(dst, Use::IdUpload, id_len)?;
            let at = {
                let mut s = staged.lock();
                crate::base::cast(DType::Int64, bytemuck::cast_slice(ids), id_dtype, &mut s.bytes_mut()[..id_len]);
                s.at(0)
            };
            q.copy(Place::Device(ids_at), Place::Host(at), id_len);
            q.hold(Box::new(staged));
        }
        Ok(Target { dst: dst.clone(), id_dtype, rows: ids.len(), values, fresh })
    }

    /// Installs new memory (nothing to do for rows written in place).
    fn install(self) {
        if let Some((ids, values)) = self.fresh {
            self.dst.install_rows(self.id_dtype, self.rows, Memory::Device(ids), Memory::Device(values));
        }
    }
}

/// `bytes` from `from` in a buffer on `ordinal` kept with `dst` for `what` ([`super::kept`]),
/// ordered before the kernels; `None` when the queue failed.
fn scratch_from(q: &mut Queue, dst: &NDArray, what: Use, ordinal: i32, from: Place, bytes: usize) -> Option<DevicePtr> {
    let t = kept::buffer(q, dst, what, ordinal, bytes)?;
    q.copy_before_kernels(Place::Device(t), from, bytes);
    Some(t)
}

/// Pinned memory holding `bytes`, kept by the queue until its work finished.
fn staged_bytes(q: &mut Queue, bytes: &[u8]) -> Result<Place> {
    let mut s = staging(bytes.len())?;
    s.bytes_mut()[..bytes.len()].copy_from_slice(bytes);
    let place = Place::Host(s.at(0));
    q.hold(Box::new(s));
    Ok(place)
}

/// The values of `v` (`bytes` long) on `ordinal`: in place, or in the buffer kept with `dst`
/// for input `position`, filled from them.
fn values_on(q: &mut Queue, dst: &NDArray, position: usize, ordinal: i32, v: &NDArray, host: Option<&[u8]>, bytes: usize) -> Result<Option<DevicePtr>> {
    let from = match host {
        Some(data) => {
            let Some(data) = data.get(..bytes) else { crate::bail!("internal error: {v:?} holds fewer values than rows") };
            staged_bytes(q, data)?
        }
        None => {
            let Some(parts) = v.device_rows() else {
                crate::bail!("internal error: {v:?} does not hold its rows in a GPU's memory");
            };
            if parts.values.ordinal == ordinal {
                return Ok(Some(parts.values));
            }
            Place::Device(parts.values)
        }
    };
    Ok(scratch_from(q, dst, Use::Rows(position), ordinal, from, bytes))
}

/// Schedules the row_sparse sums of `batch` (each [`is_native_sum`]): the ids' download, then
/// the kernels.
pub(super) fn push_sums(values: &Arc<Vec<NDArray>>, batch: Vec<SumJob>, priority: i32) {
    let dsts: Vec<NDArray> = batch.iter().map(|j| j.dst.clone()).collect();
    let (mut on_gpus, mut owners) = (Vec::new(), Vec::new());
    for job in &batch {
        for (position, v) in values[job.values.clone()].iter().enumerate().filter(|(_, v)| is_device_row_sparse(v)) {
            on_gpus.push(v.clone());
            owners.push((job.dst.clone(), position));
        }
    }
    let slot = (!on_gpus.is_empty()).then(|| push_id_downloads(on_gpus, owners, &dsts, priority));
    let reads: Vec<Var> = batch.iter().flat_map(|j| values[j.values.clone()].iter().map(NDArray::var)).collect();
    let writes: Vec<Var> = dsts.iter().map(NDArray::var).collect();
    let values = Arc::clone(values);
    engine().push_device(&reads, &writes, priority, DeviceOp::default(), move |_, done| run_sums(values, batch, slot, done));
}

fn run_sums(values: Arc<Vec<NDArray>>, batch: Vec<SumJob>, slot: Option<Slot>, done: OpDone) {
    let downloaded = match take_ids(slot) {
        Ok(d) => d,
        Err(e) => return done.finish(Err(e)),
    };
    let bytes = || batch.iter().map(|j| values[j.values.clone()].iter().map(NDArray::data_byte_len).sum::<usize>()).sum();
    let span = super::traced_span("gpu_rsp_sum", batch.len(), bytes, &batch[0].dst);
    let mut q = Queue::new();
    let mut installs = Vec::with_capacity(batch.len());
    let mut downloaded = downloaded.into_iter();
    for job in &batch {
        if let Err(e) = enqueue_sum(&mut q, &values[job.values.clone()], &job.dst, &mut downloaded, &mut installs) {
            q.fail(e.message().to_string());
        }
        if q.failed() {
            break;
        }
    }
    q.finish(
        Box::new(move |outcome| {
            let outcome = outcome.map_err(Error::new).map(|()| installs.into_iter().for_each(Target::install));
            drop(span);
            done.finish(outcome);
        }),
        Box::new((values, batch)),
    );
}

fn enqueue_sum(
    q: &mut Queue,
    vals: &[NDArray],
    dst: &NDArray,
    downloaded: &mut impl Iterator<Item = Vec<i64>>,
    installs: &mut Vec<Target>,
) -> Result<()> {
    // Each input's ids, and a host input's values.
    let mut inputs: Vec<(Vec<i64>, Option<Vec<u8>>)> = Vec::with_capacity(vals.len());
    for v in vals {
        if is_device_row_sparse(v) {
            inputs.push((downloaded.next().unwrap_or_default(), None));
        } else {
            let rows = v.rows_now()?;
            inputs.push((rows.ids, Some(rows.data)));
        }
    }
    let id_lists: Vec<&[i64]> = inputs.iter().map(|(ids, _)| &ids[..]).collect();
    let plan = sparse::plan_rows(&id_lists)?;
    let install = Target::new(q, dst, &plan.rows)?;
    let out = install.values;
    installs.push(install);
    let (ordinal, row_bytes, row_len, dtype) = (out.ordinal, dst.row_bytes(), dst.row_len(), dst.dtype());
    let total: usize = plan.positions.iter().map(Vec::len).sum();
    if total == 0 || row_bytes == 0 {
        return Ok(());
    }
    // One table: every input's positions (int64), then their first-contributor flags.
    let mut table = Vec::with_capacity(total * 9);
    for p in &plan.positions {
        table.extend_from_slice(bytemuck::cast_slice(p));
    }
    for f in &plan.first {
        table.extend_from_slice(f);
    }
    let from = kept::staged(q, dst, Use::TableStaging, &table, 0)?;
    let Some(table) = scratch_from(q, dst, Use::RowTable, ordinal, from, table.len()) else { return Ok(()) };
    let mut at = 0usize;
    for (position, ((ids, host), v)) in inputs.iter().zip(vals).enumerate() {
        let n = ids.len();
        if n == 0 {
            continue;
        }
        let Some(data) = values_on(q, dst, position, ordinal, v, host.as_deref(), n * row_bytes)? else { return Ok(()) };
        rsp_accumulate(q, out, data, table.offset(at * 8), table.offset(total * 8 + at), n as u64, row_len as u64, dtype);
        at += n;
    }
    Ok(())
}

/// Schedules `pull` ([`is_native_pull`]): the ids' download, then the gather.
pub(super) fn push_pull(pull: RowSparsePull, priority: i32) {
    let mut sources = vec![pull.stored.clone()];
    if pull.row_ids.on_device() {
        sources.push(pull.row_ids.clone());
    }
    let owners = (0..sources.len()).map(|position| (pull.out.clone(), position)).collect();
    let slot = push_id_downloads(sources, owners, std::slice::from_ref(&pull.out), priority);
    let reads = [pull.stored.var(), pull.row_ids.var()];
    let writes = [pull.out.var()];
    let (stored, out, row_ids) = (pull.stored.clone(), pull.out.clone(), pull.row_ids.clone());
    engine().push_device(&reads, &writes, priority, DeviceOp::default(), move |_, done| {
        run_pull(RowSparsePull { stored, out, row_ids }, slot, done)
    });
}

fn run_pull(pull: RowSparsePull, slot: Slot, done: OpDone) {
    let span = super::traced_span("gpu_rsp_pull", 1, || pull.out.data_byte_len(), &pull.out);
    let mut q = Queue::new();
    let mut installs = Vec::with_capacity(1);
    if let Err(e) = enqueue_pull(&mut q, &pull, Some(slot), &mut installs) {
        q.fail(e.message().to_string());
    }
    q.finish(
        Box::new(move |outcome| {
            let outcome = outcome.map_err(Error::new).map(|()| installs.into_iter().for_each(Target::install));
            drop(span);
            done.finish(outcome);
        }),
        Box::new(pull),
    );
}

fn enqueue_pull(q: &mut Queue, pull: &RowSparsePull, slot: Option<Slot>, installs: &mut Vec<Target>) -> Result<()> {
    let mut downloaded = take_ids(slot)?.into_iter();
    let stored_ids = downloaded.next().unwrap_or_default();
    // The wanted rows: the ids cast to int64, then `sparse::retained_rows` (as the host backend's pull).
    let want = match downloaded.next() {
        Some(ids) => ids,
        None => {
            let rid = &pull.row_ids;
            let mut ids = crate::base::buffer::try_filled(rid.size(), 0i64)?;
            rid.read_bytes(|b| crate::base::cast(rid.dtype(), b, DType::Int64, bytemuck::cast_slice_mut(&mut ids)));
            ids
        }
    };
    let want = sparse::retained_rows(want, &stored_ids);
    let positions = sparse::retain_positions(&stored_ids, &want)?;
    let install = Target::new(q, &pull.out, &want)?;
    let out = install.values;
    installs.push(install);
    let row_bytes = pull.out.row_bytes();
    if want.is_empty() || row_bytes == 0 {
        return Ok(());
    }
    let ordinal = out.ordinal;
    let from = kept::staged(q, &pull.out, Use::TableStaging, bytemuck::cast_slice(&positions), 0)?;
    let Some(pos) = scratch_from(q, &pull.out, Use::RowTable, ordinal, from, positions.len() * 8) else { return Ok(()) };
    let n_stored = stored_ids.len();
    // With no stored rows every position is -1: the kernel reads no row.
    let rows = if n_stored == 0 {
        pos
    } else {
        match values_on(q, &pull.out, 0, ordinal, &pull.stored, None, n_stored * row_bytes)? {
            Some(p) => p,
            None => return Ok(()),
        }
    };
    rsp_gather(q, out, rows, pos, want.len() as u64, n_stored as u64, row_bytes as u64);
    Ok(())
}
