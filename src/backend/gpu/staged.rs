//! Work the GPU backend does not run on the GPU goes through the host: each GPU array it
//! reads gets a pinned mirror filled by a driver copy, the host backend runs the job on the
//! mirrors, and each mirror written is copied back. The engine orders the three steps by the
//! arrays' variables; values are the host backend's, bit for bit. A row_sparse GPU array's
//! mirror is a host row_sparse array, its rows downloaded and uploaded by [`super::rows`].
//!
//! A staged job's dense mirrors are kept with the GPU arrays they mirror ([`NDArray::kept`],
//! one per view), as MXNet's `CommCPU` keeps a pinned copy buffer per key: a
//! steady loop of staged jobs (a `local` store's GPU values, an `nccl` store's single values)
//! allocates no pinned memory after its first iteration. The engine orders every use of a
//! mirror by the mirror's own variable, so a job's copy into it waits for the previous job's
//! reads. Host code outside the engine ([`host_readable`]) gets mirrors of its own.

use super::copy::push_copies;
use super::rows::{host_mirror, is_device_row_sparse, push_downloads, push_uploads};
use crate::engine::{engine, Var};
use crate::error::Result;
use crate::ndarray::NDArray;

/// The dense mirrors kept with a GPU array's memory, each with the view it mirrors (where it
/// starts on the GPU, its shape and dtype).
#[derive(Default)]
struct Mirrors(Vec<(Option<crate::gpu::DevicePtr>, NDArray)>);

/// A dense pinned mirror of `a`: the one kept with it (made at first use) when `kept`, else
/// a new one from the staging pool.
fn mirror_of(a: &NDArray, kept: bool) -> Result<NDArray> {
    if !kept {
        return a.staging_mirror();
    }
    let at = a.device_ptr();
    a.kept(|mirrors: &mut Mirrors| {
        if let Some((_, m)) = mirrors.0.iter().find(|(p, m)| *p == at && m.shape() == a.shape() && m.dtype() == a.dtype()) {
            return Ok(m.clone());
        }
        let m = a.staging_mirror()?;
        mirrors.0.push((at, m.clone()));
        Ok(m)
    })
}

/// The mirrors of one staged job: which are copied back where.
#[derive(Default)]
pub(super) struct Staging {
    /// Whether dense mirrors are the ones kept with their arrays (jobs run by the engine).
    kept: bool,
    copy_in: Vec<(NDArray, NDArray)>,
    copy_back: Vec<(NDArray, NDArray)>,
    rows_in: Vec<(NDArray, NDArray)>,
    rows_back: Vec<(NDArray, NDArray)>,
}

impl Staging {
    /// Staging for a job the engine runs: dense mirrors kept with their arrays.
    pub(super) fn kept() -> Staging {
        Staging { kept: true, ..Staging::default() }
    }

    /// `a` as the host job reads it: itself, or a mirror filled from it.
    pub(super) fn read(&mut self, a: &NDArray) -> Result<NDArray> {
        if is_device_row_sparse(a) {
            let mirror = host_mirror(a)?;
            self.rows_in.push((a.clone(), mirror.clone()));
            return Ok(mirror);
        }
        if !a.on_device() {
            return Ok(a.clone());
        }
        let mirror = mirror_of(a, self.kept)?;
        // A kept mirror is filled once per job, however often the job reads its array.
        if !self.copy_in.iter().any(|(_, m)| m.same_chunk(&mirror)) {
            self.copy_in.push((a.clone(), mirror.clone()));
        }
        Ok(mirror)
    }

    /// `a` as the host job writes it (and reads it when `reads`): itself, or a mirror copied
    /// back into it after the job.
    pub(super) fn write(&mut self, a: &NDArray, reads: bool) -> Result<NDArray> {
        if is_device_row_sparse(a) {
            let mirror = if reads { self.read(a)? } else { host_mirror(a)? };
            self.rows_back.push((mirror.clone(), a.clone()));
            return Ok(mirror);
        }
        if !a.on_device() {
            return Ok(a.clone());
        }
        let mirror = if reads { self.read(a)? } else { mirror_of(a, self.kept)? };
        if !self.copy_back.iter().any(|(m, _)| m.same_chunk(&mirror)) {
            self.copy_back.push((mirror.clone(), a.clone()));
        }
        Ok(mirror)
    }

    /// Schedules the copies in, then `job` (which schedules the host work), then the copies back.
    pub(super) fn run(self, priority: i32, job: impl FnOnce()) {
        push_copies(self.copy_in, priority);
        push_downloads(self.rows_in, priority);
        job();
        push_copies(self.copy_back, priority);
        push_uploads(self.rows_back, priority);
    }
}

/// Schedules a failure onto `written`: staging could not be set up (no pinned memory), and
/// the next wait on those arrays reports why.
pub(super) fn fail(written: &[&NDArray], why: crate::Error, priority: i32) {
    let vars: Vec<Var> = written.iter().map(|a| a.var()).collect();
    engine().push(&[], &vars, priority, move |_| Err(why));
}

/// `arrays` as host code can read them: GPU arrays replaced by pinned mirrors whose copies are
/// scheduled now (a distributed store's push of GPU values reads them on the host).
pub(crate) fn host_readable(arrays: Vec<NDArray>, priority: i32) -> Result<Vec<NDArray>> {
    if !super::touches_device(arrays.iter()) {
        return Ok(arrays);
    }
    let mut staging = Staging::default();
    let out = arrays.iter().map(|a| staging.read(a)).collect::<Result<Vec<_>>>()?;
    staging.run(priority, || {});
    Ok(out)
}
