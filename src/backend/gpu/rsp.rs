//! Row_sparse sums and pulls into GPU row_sparse arrays, run as kernels on the destination's
//! GPU (`kernels/row_sparse.cu`). Only row ids come to the host: a first op downloads the
//! row ids of the GPU arrays read (driver copies, completed from their events); a second op,
//! ordered after it by the engine (both write the destinations), plans on the host where each
//! row goes — [`sparse::plan_rows`] for sums, [`sparse::retain_positions`] for pulls, the host
//! backend's own plans — allocates the destination's new rows on its GPU, brings the values
//! there (peer copies from other GPUs, uploads of host values), launches
//! `rsp_accumulate_<dtype>` once per input in order (a sum) or `rsp_gather` (a pull), uploads
//! the new ids, and installs both into the destination when the events fired. Results are the
//! host backend's bit for bit; a failure leaves the destination as it was and is reported by
//! the next wait on it. Workers never wait for the GPU.

use super::rows::{is_device_row_sparse, Install};
use crate::backend::{RowSparsePull, SumJob};
use crate::engine::{engine, OpDone, Var};
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
    staged: Option<PinnedMemory>,
    dtype: DType,
    n: usize,
    /// A row_sparse source's row count: its ids are checked against it (malformed ids read
    /// as no rows, as [`NDArray::rows_now`] reads them).
    check_rows: Option<usize>,
}

fn enqueue_ids(q: &mut Queue, src: &NDArray) -> Result<IdLanding> {
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
    let staged = staging(bytes)?;
    q.copy(Place::Host(staged.at(0)), Place::Device(from), bytes);
    Ok(IdLanding { staged: Some(staged), dtype, n, check_rows })
}

fn land_ids(l: IdLanding) -> Result<Vec<i64>> {
    let Some(staged) = l.staged else { return Ok(Vec::new()) };
    let ids = row_ids_of(l.dtype, &staged.bytes()[..l.n * l.dtype.size()], l.n)?;
    match l.check_rows {
        Some(rows) if check_row_ids(&ids, rows).is_err() => Ok(Vec::new()),
        _ => Ok(ids),
    }
}

/// Schedules the download of the ids of `sources` (GPU row_sparse arrays' row ids, or dense
/// GPU arrays of ids) as an op writing `writes`; the ids land in the returned slot.
fn push_id_downloads(sources: Vec<NDArray>, writes: &[NDArray], priority: i32) -> Slot {
    let slot: Slot = Arc::new(Mutex::new(None));
    let filled = Arc::clone(&slot);
    let held = (sources.clone(), writes.to_vec());
    let reads: Vec<&Var> = held.0.iter().map(NDArray::var).collect();
    let write_vars: Vec<&Var> = held.1.iter().map(NDArray::var).collect();
    let written = writes.to_vec();
    engine().push_async(&reads, &write_vars, priority, move |_, done| {
        let bytes = sources.iter().filter_map(NDArray::device_rows).map(|p| p.rows * p.id_dtype.size()).sum();
        let span = super::traced_span("gpu_row_ids", sources.len(), bytes, &sources[0]);
        let mut q = Queue::new();
        let mut landings = Vec::with_capacity(sources.len());
        for s in &sources {
            match enqueue_ids(&mut q, s) {
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

impl Install {
    /// New device memory on `dst`'s GPU for `ids` and their values, the ids' upload enqueued.
    fn new(q: &mut Queue, dst: &NDArray, ids: &[i64]) -> Result<Install> {
        let ordinal = dst.ctx().dev_id;
        let id_dtype = dst.row_id_dtype();
        let values = DeviceMemory::zeroed(ordinal, ids.len() * dst.row_bytes()).map_err(Error::new)?;
        let id_mem = DeviceMemory::zeroed(ordinal, ids.len() * id_dtype.size()).map_err(Error::new)?;
        if !ids.is_empty() {
            let mut staged = staging(ids.len() * id_dtype.size())?;
            crate::base::cast(DType::Int64, bytemuck::cast_slice(ids), id_dtype, staged.bytes_mut());
            q.copy(Place::Device(id_mem.ptr()), Place::Host(staged.at(0)), staged.len());
            q.hold(Box::new(staged));
        }
        Ok(Install { dst: dst.clone(), id_dtype, rows: ids.len(), ids: id_mem, values })
    }

    fn install(self) {
        self.dst.install_rows(self.id_dtype, self.rows, Memory::Device(self.ids), Memory::Device(self.values));
    }
}

/// `bytes` from `from` in scratch memory on `ordinal` (listed in `temps`), ordered before the
/// kernels; `None` when the queue failed.
fn scratch_from(q: &mut Queue, ordinal: i32, from: Place, bytes: usize, temps: &mut Vec<DevicePtr>) -> Option<DevicePtr> {
    let t = q.alloc_temp(ordinal, bytes)?;
    temps.push(t);
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

/// The values of `v` (`bytes` long) on `ordinal`: in place, or in scratch filled from them.
fn values_on(q: &mut Queue, ordinal: i32, v: &NDArray, host: Option<&[u8]>, bytes: usize, temps: &mut Vec<DevicePtr>) -> Result<Option<DevicePtr>> {
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
    Ok(scratch_from(q, ordinal, from, bytes, temps))
}

/// Schedules the row_sparse sums of `batch` (each [`is_native_sum`]): the ids' download, then
/// the kernels.
pub(super) fn push_sums(values: &Arc<Vec<NDArray>>, batch: Vec<SumJob>, priority: i32) {
    let dsts: Vec<NDArray> = batch.iter().map(|j| j.dst.clone()).collect();
    let on_gpus: Vec<NDArray> =
        batch.iter().flat_map(|j| values[j.values.clone()].iter()).filter(|v| is_device_row_sparse(v)).cloned().collect();
    let slot = (!on_gpus.is_empty()).then(|| push_id_downloads(on_gpus, &dsts, priority));
    let reads: Vec<&Var> = batch.iter().flat_map(|j| values[j.values.clone()].iter().map(NDArray::var)).collect();
    let writes: Vec<&Var> = dsts.iter().map(NDArray::var).collect();
    let values = Arc::clone(values);
    engine().push_async(&reads, &writes, priority, move |_, done| run_sums(values, batch, slot, done));
}

fn run_sums(values: Arc<Vec<NDArray>>, batch: Vec<SumJob>, slot: Option<Slot>, done: OpDone) {
    let downloaded = match take_ids(slot) {
        Ok(d) => d,
        Err(e) => return done.finish(Err(e)),
    };
    let bytes = batch.iter().map(|j| values[j.values.clone()].iter().map(NDArray::data_byte_len).sum::<usize>()).sum();
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
            let outcome = outcome.map_err(Error::new).map(|()| installs.into_iter().for_each(Install::install));
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
    installs: &mut Vec<Install>,
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
    let install = Install::new(q, dst, &plan.rows)?;
    let out = install.values.ptr();
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
    let from = staged_bytes(q, &table)?;
    let mut temps = Vec::new();
    let result = (|| -> Result<()> {
        let Some(table) = scratch_from(q, ordinal, from, table.len(), &mut temps) else { return Ok(()) };
        let mut at = 0usize;
        for ((ids, host), v) in inputs.iter().zip(vals) {
            let n = ids.len();
            if n == 0 {
                continue;
            }
            let Some(data) = values_on(q, ordinal, v, host.as_deref(), n * row_bytes, &mut temps)? else { return Ok(()) };
            rsp_accumulate(q, out, data, table.offset(at * 8), table.offset(total * 8 + at), n as u64, row_len as u64, dtype);
            at += n;
        }
        Ok(())
    })();
    for t in temps {
        q.free_temp(t);
    }
    result
}

/// Schedules `pull` ([`is_native_pull`]): the ids' download, then the gather.
pub(super) fn push_pull(pull: RowSparsePull, priority: i32) {
    let mut sources = vec![pull.stored.clone()];
    if pull.row_ids.on_device() {
        sources.push(pull.row_ids.clone());
    }
    let slot = push_id_downloads(sources, std::slice::from_ref(&pull.out), priority);
    let reads = [pull.stored.var(), pull.row_ids.var()];
    let writes = [pull.out.var()];
    let (stored, out, row_ids) = (pull.stored.clone(), pull.out.clone(), pull.row_ids.clone());
    engine().push_async(&reads, &writes, priority, move |_, done| {
        run_pull(RowSparsePull { stored, out, row_ids }, slot, done)
    });
}

fn run_pull(pull: RowSparsePull, slot: Slot, done: OpDone) {
    let span = super::traced_span("gpu_rsp_pull", 1, pull.out.data_byte_len(), &pull.out);
    let mut q = Queue::new();
    let mut installs = Vec::with_capacity(1);
    if let Err(e) = enqueue_pull(&mut q, &pull, Some(slot), &mut installs) {
        q.fail(e.message().to_string());
    }
    q.finish(
        Box::new(move |outcome| {
            let outcome = outcome.map_err(Error::new).map(|()| installs.into_iter().for_each(Install::install));
            drop(span);
            done.finish(outcome);
        }),
        Box::new(pull),
    );
}

fn enqueue_pull(q: &mut Queue, pull: &RowSparsePull, slot: Option<Slot>, installs: &mut Vec<Install>) -> Result<()> {
    let mut downloaded = take_ids(slot)?.into_iter();
    let stored_ids = downloaded.next().unwrap_or_default();
    // The wanted rows: the ids cast to int64, sorted, unique (as the host backend's pull).
    let mut want = match downloaded.next() {
        Some(ids) => ids,
        None => {
            let rid = &pull.row_ids;
            let mut ids = crate::base::buffer::try_filled(rid.size(), 0i64)?;
            rid.read_bytes(|b| crate::base::cast(rid.dtype(), b, DType::Int64, bytemuck::cast_slice_mut(&mut ids)));
            ids
        }
    };
    want.sort_unstable();
    want.dedup();
    let positions = sparse::retain_positions(&stored_ids, &want)?;
    let install = Install::new(q, &pull.out, &want)?;
    let out = install.values.ptr();
    installs.push(install);
    let row_bytes = pull.out.row_bytes();
    if want.is_empty() || row_bytes == 0 {
        return Ok(());
    }
    let ordinal = out.ordinal;
    let from = staged_bytes(q, bytemuck::cast_slice(&positions))?;
    let mut temps = Vec::new();
    let result = (|| -> Result<()> {
        let Some(pos) = scratch_from(q, ordinal, from, positions.len() * 8, &mut temps) else { return Ok(()) };
        let n_stored = stored_ids.len();
        // With no stored rows every position is -1: the kernel reads no row.
        let rows = if n_stored == 0 {
            pos
        } else {
            match values_on(q, ordinal, &pull.stored, None, n_stored * row_bytes, &mut temps)? {
                Some(p) => p,
                None => return Ok(()),
            }
        };
        rsp_gather(q, out, rows, pos, want.len() as u64, n_stored as u64, row_bytes as u64);
        Ok(())
    })();
    for t in temps {
        q.free_temp(t);
    }
    result
}
