//! Work the GPU backend does not run on the GPU goes through the host: each GPU array it
//! reads gets a pinned mirror filled by a driver copy, the host backend runs the job on the
//! mirrors, and each mirror written is copied back. The engine orders the three steps by the
//! arrays' variables; values are the host backend's, bit for bit. A row_sparse GPU array's
//! mirror is a host row_sparse array, its rows downloaded and uploaded by [`super::rows`].

use super::copy::push_copies;
use super::rows::{host_mirror, is_device_row_sparse, push_downloads, push_uploads};
use crate::engine::{engine, Var};
use crate::error::Result;
use crate::ndarray::NDArray;

/// The mirrors of one staged job: which are copied back where.
#[derive(Default)]
pub(super) struct Staging {
    copy_in: Vec<(NDArray, NDArray)>,
    copy_back: Vec<(NDArray, NDArray)>,
    rows_in: Vec<(NDArray, NDArray)>,
    rows_back: Vec<(NDArray, NDArray)>,
}

impl Staging {
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
        let mirror = a.staging_mirror()?;
        self.copy_in.push((a.clone(), mirror.clone()));
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
        let mirror = if reads { self.read(a)? } else { a.staging_mirror()? };
        self.copy_back.push((mirror.clone(), a.clone()));
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
    let vars: Vec<&Var> = written.iter().map(|a| a.var()).collect();
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
