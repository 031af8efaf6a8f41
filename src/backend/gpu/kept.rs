//! Device buffers a GPU op keeps with the array it writes ([`NDArray::kept`]), so that a
//! steady loop allocates nothing after its first iteration: MXNet's `CommDevice` keeps a copy
//! buffer per value of each key beside its merge buffer (`copy_buf`); so do sums here, and so
//! do the fused sum's table, row_sparse work's tables and copies, and compression's codes. The
//! ops that use a buffer write its array, so the engine runs them one at a time, each after
//! the previous one's work has finished. Row_sparse ops keep their pinned staging buffers
//! (row ids landing from the GPU, tables and ids going to it) the same way, so that how many
//! are in flight at once never sends the staging pool to the driver. A device buffer is made
//! (in stream order on its device's compute stream) at the first op needing it, replaced when an op needs more bytes (the old
//! one freed after that op's work), and freed with the array's memory: when the store is
//! freed, a key's value is replaced, or a user frees an output.

use crate::error::{Error, Result};
use crate::gpu::{DevicePtr, PinnedMemory, Place, Queue, StreamMemory};
use crate::ndarray::NDArray;
use parking_lot::Mutex;
use std::sync::Arc;

/// What a kept buffer is for (value positions count from 0 in the job's order).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Use {
    /// A dense sum's copy of value `n` on the merge buffer's GPU (exact size).
    Copy(usize),
    /// The table of a fused sum of small keys (kept with the device's first key), on the
    /// device and in pinned memory.
    FusedTable,
    /// The table of a fused launch of small copies within one GPU (kept with the device's
    /// first destination), on the device and in pinned memory.
    CopyTable,
    /// A row_sparse sum's or pull's position table.
    RowTable,
    /// A row_sparse sum's copy of input `n`'s rows on the destination's GPU (the stored
    /// value's for a pull).
    Rows(usize),
    /// Compression's codes on the merge buffer's GPU.
    Packed,
    /// Compression's codes of value `n` on that value's GPU.
    RemotePacked(usize),
    /// Pinned: the row ids of source `n` of a row_sparse op, landing from its GPU.
    IdLanding(usize),
    /// Pinned: a row_sparse op's table (positions, flags) on its way to the GPU.
    TableStaging,
    /// Pinned: a row_sparse destination's new row ids on their way to its GPU.
    IdUpload,
}

/// A kept pinned buffer: shared with the queue whose work uses it, which keeps it alive should
/// the array replace it meanwhile.
pub(super) type SharedPinned = Arc<Mutex<PinnedMemory>>;

#[derive(Default)]
struct Kept {
    device: Vec<(Use, StreamMemory)>,
    pinned: Vec<(Use, SharedPinned)>,
}

/// A buffer of at least `bytes` on `gpu(ordinal)` kept with `array` for `what`: the kept one,
/// or a new one (exact for copies of dense values, whose size is the key's; otherwise rounded
/// up to a power of two, since tables and rows vary), the one it replaces held by the queue
/// until the op's work has finished. `None` when the queue failed (or fails now).
pub(super) fn buffer(q: &mut Queue, array: &NDArray, what: Use, ordinal: i32, bytes: usize) -> Option<DevicePtr> {
    if q.failed() {
        return None;
    }
    array.kept(|kept: &mut Kept| {
        let slot = kept.device.iter().position(|(u, _)| *u == what);
        if let Some(i) = slot {
            let m = &kept.device[i].1;
            if m.len() >= bytes && m.ptr().ordinal == ordinal {
                return Some(m.ptr());
            }
        }
        let len = match what {
            Use::Copy(_) => bytes,
            _ => bytes.checked_next_power_of_two().unwrap_or(bytes),
        };
        let made = q.alloc_owned(ordinal, len)?;
        let ptr = made.ptr();
        match slot {
            Some(i) => q.hold(Box::new(std::mem::replace(&mut kept.device[i].1, made))),
            None => kept.device.push((what, made)),
        }
        Some(ptr)
    })
}

/// A pinned staging buffer of at least `bytes` kept with `array` for `what` (from the staging
/// pool, rounded up to a power of two; a smaller one kept before goes back to the pool when the
/// last user lets go). The caller hands a clone to the queue whose work uses it.
pub(super) fn pinned(array: &NDArray, what: Use, bytes: usize) -> Result<SharedPinned> {
    array.kept(|kept: &mut Kept| {
        let slot = kept.pinned.iter().position(|(u, _)| *u == what);
        if let Some(i) = slot {
            if kept.pinned[i].1.lock().len() >= bytes {
                return Ok(Arc::clone(&kept.pinned[i].1));
            }
        }
        let len = bytes.checked_next_power_of_two().unwrap_or(bytes);
        let made: SharedPinned = Arc::new(Mutex::new(PinnedMemory::staging(len).map_err(Error::new)?));
        match slot {
            Some(i) => kept.pinned[i].1 = Arc::clone(&made),
            None => kept.pinned.push((what, Arc::clone(&made))),
        }
        Ok(made)
    })
}

/// `bytes` in the pinned buffer (of at least `room` bytes) kept with `owner` for `what`, which
/// the queue holds until its work finished.
pub(super) fn staged(q: &mut Queue, owner: &NDArray, what: Use, bytes: &[u8], room: usize) -> Result<Place> {
    let s = pinned(owner, what, bytes.len().max(room))?;
    let at = {
        let mut staged = s.lock();
        staged.bytes_mut()[..bytes.len()].copy_from_slice(bytes);
        staged.at(0)
    };
    q.hold(Box::new(s));
    Ok(Place::Host(at))
}

/// A fused launch's `table` on `gpu(ordinal)`, copied there ahead of the kernels: its device
/// memory and its pinned staging both kept with `owner` for `what`, of at least `room` bytes
/// (the most the call site's table may take), so that a steady loop takes neither from the
/// driver nor from the staging pool (whose peak use would depend on how many tables happen
/// to be in flight at once). `None` when the queue failed.
pub(super) fn table(q: &mut Queue, owner: &NDArray, what: Use, ordinal: i32, table: &[u8], room: usize) -> Option<DevicePtr> {
    let from = match staged(q, owner, what, table, room) {
        Ok(place) => place,
        Err(e) => {
            q.fail(e.message().to_string());
            return None;
        }
    };
    let device_table = buffer(q, owner, what, ordinal, table.len().max(room))?;
    q.copy_before_kernels(Place::Device(device_table), from, table.len());
    Some(device_table)
}
