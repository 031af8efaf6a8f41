//! A dist server's dense updates: the updater gets host arrays over the server's round sum and
//! stored value, kept across rounds. Making a host array and freeing it are host calls that
//! each queue work in the host's engine (a new engine variable, its deletion), and a server
//! answers a key only after its update: a view made and freed per round cost about 50 us of
//! every key's turn. A kept view is one host array with one engine variable, so the host also
//! orders one round's updater ops after the last's.

use super::dlpack::HostArray;
use super::host::Host;
use crate::engine::engine;
use crate::ffi::NDArrayHandle;
use crate::{DType, NDArray, Result};
use parking_lot::Mutex;
use std::collections::HashMap;

/// Which memory a view stands for.
type Over = (usize, usize, DType, Vec<usize>);

#[derive(Default)]
pub(super) struct ServerViews(Mutex<HashMap<Over, HostArray>>);

impl ServerViews {
    /// More than this many kept (arrays the server has since replaced), all are let go.
    const MOST: usize = 4096;

    /// One updater call on dense `recv` and `local`, waiting on the calling thread: after the
    /// store's writes to `recv` and its uses of `local`, `update` gets shallow copies of the
    /// views (the frontend frees those); then the host's ops on both are waited for, as the
    /// server reads `local` next and the next round writes `recv`.
    pub fn update(&self, host: &Host, recv: &NDArray, local: &NDArray, update: impl FnOnce(NDArrayHandle, NDArrayHandle)) -> Result<()> {
        engine().run_sync(&[recv.var()], &[local.var()], || ())?;
        let (recv_view, local_view) = (self.over(host, recv)?, self.over(host, local)?);
        let (r, l) = host.shallow_copies(recv_view, local_view)?;
        update(r, l);
        host.wait_to_write(local_view)?;
        host.wait_to_write(recv_view)
    }

    /// The kept view over `array`, made at its first update.
    fn over(&self, host: &Host, array: &NDArray) -> Result<NDArrayHandle> {
        let key = (array.data_ptr() as usize, array.data_byte_len(), array.dtype(), array.shape().to_vec());
        let mut views = self.0.lock();
        if let Some(v) = views.get(&key) {
            return Ok(v.handle);
        }
        if views.len() >= Self::MOST {
            // Every round waits for its views' ops, so none is pending here.
            views.drain().for_each(|(_, v)| v.forget(host));
        }
        // The view holds `array` (its memory stays while the view is kept).
        let view = HostArray::over_native(host, array)?;
        let handle = view.handle;
        views.insert(key, view);
        Ok(handle)
    }

    /// Lets every view go, waiting for their host ops (the store is going).
    pub fn free_all(&self, host: &Host) {
        for (_, v) in std::mem::take(&mut *self.0.lock()) {
            v.free(host);
        }
    }
}
