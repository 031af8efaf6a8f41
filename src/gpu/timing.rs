//! GPU work in the profiler's trace: each copy, memset and kernel launch a [`super::Queue`]
//! enqueues while the profiler records engine ops, timed on the GPU by a pair of events
//! recorded around it on its stream, and written to the trace as a span on that stream's row
//! (`gpu(0) stream 0 (compute)`, in the device's process `gpu/0`).
//!
//! How the GPU's times become the trace's (the profiler's host clock, [`crate::profiler::now_us`]):
//! per device, a reference event is recorded on a stream of its own that nothing else uses and
//! waited for at once; its host time is the midpoint of the host clock read before the record
//! and after the wait (the GPU stamped it in between; the tightest of three tries is kept, and
//! the error is half its window). A span is then
//! `reference + cuEventElapsedTime(reference, event)` for its two events, read on the
//! completion thread once the op's work finished. The reference is renewed when older than
//! [`REFRESH_US`], so elapsed times stay short (the driver answers them as `f32` ms).
//!
//! Each item's args also carry `enqueued_us`, the host time its call was made, on the same clock.
//!
//! While recording, an item's start event, its call and its end event are enqueued under a
//! lock per stream, so that no other thread's work lands between the two events; with the
//! profiler off nothing here runs (one relaxed atomic load per enqueue, in `Queue::on_item`).

use super::device::Lane;
use super::driver::{runtime, Api, Handle, Runtime};
use crate::profiler::{self, Args};
use once_cell::sync::{Lazy, OnceCell};
use parking_lot::{Mutex, MutexGuard};
use std::os::raw::c_uint;
use std::sync::Arc;

/// `CU_EVENT_DEFAULT`: an event that records a time.
const CU_EVENT_DEFAULT: c_uint = 0;
/// Record-and-wait rounds per calibration; the tightest is kept.
const CALIBRATION_TRIES: usize = 3;
/// `CU_STREAM_NON_BLOCKING`.
const CU_STREAM_NON_BLOCKING: c_uint = 1;
/// A device's reference is renewed when older than this (µs of the host clock): `f32`
/// milliseconds keep about 0.1 µs over a second.
pub const REFRESH_US: f64 = 1e6;

/// What the trace calls a lane's stream: its number on the device and what it carries.
pub(crate) fn row_name(ordinal: i32, lane: Lane) -> String {
    let what = match lane {
        Lane::Compute => "compute",
        Lane::HostToDevice => "host to device",
        Lane::DeviceToHost => "device to host",
    };
    format!("gpu({ordinal}) stream {} ({what})", lane as usize)
}

/// An event of the profiler's, destroyed when dropped.
struct Mark {
    ordinal: i32,
    event: usize,
}

impl Mark {
    /// A timing event recorded now on `stream` (`ordinal`'s context current); None when the
    /// driver refuses (the item then goes untimed: profiling never fails the work).
    fn record(rt: &Runtime, api: &Api, ordinal: i32, stream: Handle) -> Option<Mark> {
        let mut e: Handle = std::ptr::null_mut();
        // SAFETY: the device's context is current (the caller runs inside `with_context`);
        // valid out-pointer.
        rt.check(ordinal, "cuEventCreate", unsafe { (api.event_create)(&mut e, CU_EVENT_DEFAULT) }).ok()?;
        let mark = Mark { ordinal, event: e as usize };
        // SAFETY: a fresh event and one of the device's streams.
        rt.check(ordinal, "cuEventRecord", unsafe { (api.event_record)(e, stream) }).ok()?;
        Some(mark)
    }

    fn handle(&self) -> Handle {
        self.event as Handle
    }
}

impl Drop for Mark {
    fn drop(&mut self) {
        let Ok(rt) = runtime() else { return };
        let (ordinal, event) = (self.ordinal, self.event);
        let _ = rt.with_context(ordinal, |api| {
            // SAFETY: created by cuEventCreate in `Mark::record`, destroyed once (the driver
            // releases a pending event's resources when it completes).
            rt.check(ordinal, "cuEventDestroy", unsafe { (api.event_destroy)(event as Handle) })
        });
    }
}

/// A device's point of GPU time whose host time is known.
pub(crate) struct Reference {
    mark: Mark,
    /// The host clock (µs) at which the GPU stamped `mark`.
    host_us: f64,
}

static REFERENCES: Lazy<Vec<Mutex<Option<Arc<Reference>>>>> =
    Lazy::new(|| (0..runtime().map_or(0, |rt| rt.devices.len())).map(|_| Mutex::new(None)).collect());
/// Per device, the stream the references are recorded on (idle otherwise), made at first use.
static IDLE_STREAMS: Lazy<Vec<OnceCell<usize>>> =
    Lazy::new(|| (0..runtime().map_or(0, |rt| rt.devices.len())).map(|_| OnceCell::new()).collect());
/// Per device and lane, held while a recorded item's events and call are enqueued.
static STREAM_LOCKS: Lazy<Vec<[Mutex<()>; 3]>> =
    Lazy::new(|| (0..runtime().map_or(0, |rt| rt.devices.len())).map(|_| Default::default()).collect());

/// `ordinal`'s current reference, renewed when older than [`REFRESH_US`].
pub(crate) fn reference(ordinal: i32) -> Option<Arc<Reference>> {
    let slot = REFERENCES.get(usize::try_from(ordinal).ok()?)?;
    let mut slot = slot.lock();
    if let Some(r) = slot.as_ref().filter(|r| profiler::now_us() - r.host_us < REFRESH_US) {
        return Some(Arc::clone(r));
    }
    let fresh = Arc::new(calibrate(ordinal)?);
    *slot = Some(Arc::clone(&fresh));
    Some(fresh)
}

fn calibrate(ordinal: i32) -> Option<Reference> {
    let rt = runtime().ok()?;
    let idle = IDLE_STREAMS.get(usize::try_from(ordinal).ok()?)?;
    rt.with_context(ordinal, |api| {
        let stream = *idle.get_or_try_init(|| {
            let mut h: Handle = std::ptr::null_mut();
            // SAFETY: the device's context is current; valid out-pointer. Lives for the process.
            rt.check(ordinal, "cuStreamCreate", unsafe { (api.stream_create)(&mut h, CU_STREAM_NON_BLOCKING) })?;
            Ok::<usize, String>(h as usize)
        })? as Handle;
        // The tightest of a few tries (a try the host thread was descheduled in is wide).
        let mut best: Option<(Reference, f64)> = None;
        for _ in 0..CALIBRATION_TRIES {
            let before = profiler::now_us();
            let mark = Mark::record(rt, api, ordinal, stream).ok_or_else(String::new)?;
            // SAFETY: an event recorded just above on an otherwise idle stream.
            rt.check(ordinal, "cuEventSynchronize", unsafe { (api.event_synchronize)(mark.handle()) })?;
            let after = profiler::now_us();
            if best.as_ref().is_none_or(|(_, width)| after - before < *width) {
                best = Some((Reference { mark, host_us: (before + after) / 2.0 }, after - before));
            }
        }
        best.map(|(r, _)| r).ok_or_else(String::new)
    })
    .ok()
}

/// One recorded item: its events, what it is, and the reference its times are read against.
pub(crate) struct Timed {
    ordinal: i32,
    lane: Lane,
    start: Mark,
    end: Mark,
    reference: Arc<Reference>,
    name: String,
    args: Args,
}

/// An item about to be enqueued while the profiler records: the stream's lock and the device's
/// reference, taken before the item's context is made current.
pub(crate) struct Recording {
    stream: MutexGuard<'static, ()>,
    reference: Arc<Reference>,
}

/// Starts recording an item on `ordinal`'s `lane`; None when the device cannot be timed.
pub(crate) fn begin(ordinal: i32, lane: Lane) -> Option<Recording> {
    let reference = reference(ordinal)?;
    let lock = STREAM_LOCKS.get(usize::try_from(ordinal).ok()?)?[lane as usize].lock();
    Some(Recording { stream: lock, reference })
}

/// Enqueues `call` on `stream` between a start and an end event (context current). The item
/// is timed when both events were recorded and the call succeeded.
pub(crate) fn around(
    recording: Recording,
    ordinal: i32,
    lane: Lane,
    api: &Api,
    stream: Handle,
    label: impl FnOnce() -> (String, Args),
    call: impl FnOnce(&Api, Handle) -> Result<(), String>,
) -> Result<Option<Timed>, String> {
    let Ok(rt) = runtime() else { return call(api, stream).map(|()| None) };
    let enqueued_us = profiler::now_us();
    let start = Mark::record(rt, api, ordinal, stream);
    call(api, stream)?;
    let end = Mark::record(rt, api, ordinal, stream);
    drop(recording.stream);
    let (Some(start), Some(end)) = (start, end) else { return Ok(None) };
    let (name, mut args) = label();
    // Whether the GPU waited for the host: an item enqueued after its stream went idle starts
    // late by the host's delay, not by the stream's work ahead of it.
    args.push(("enqueued_us", profiler::Arg::Int(enqueued_us.round() as i64)));
    Ok(Some(Timed { ordinal, lane, start, end, reference: recording.reference, name, args }))
}

/// Writes the finished items to the profiler's records (on the completion thread, after the
/// op's events fired, before its completion runs). An item whose times the driver does not
/// answer (failed work) is left out.
pub(crate) fn report(items: Vec<Timed>) {
    let Ok(rt) = runtime() else { return };
    for t in items {
        let read = rt.with_context(t.ordinal, |api| {
            let elapsed = |to: &Mark| {
                let mut ms = 0f32;
                // SAFETY: both events were recorded on this device and have completed (the
                // op's completion events, recorded after them on every stream it used, fired).
                rt.check(t.ordinal, "cuEventElapsedTime", unsafe {
                    (api.event_elapsed_time)(&mut ms, t.reference.mark.handle(), to.handle())
                })
                .map(|()| t.reference.host_us + f64::from(ms) * 1e3)
            };
            Ok((elapsed(&t.start)?, elapsed(&t.end)?))
        });
        let Ok((start, end)) = read else { continue };
        let row = profiler::row(&row_name(t.ordinal, t.lane));
        profiler::record_span(format!("gpu/{}", t.ordinal), row, t.name, start, end.max(start), t.args);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_named_by_device_stream_number_and_purpose() {
        assert_eq!(row_name(0, Lane::Compute), "gpu(0) stream 0 (compute)");
        assert_eq!(row_name(1, Lane::HostToDevice), "gpu(1) stream 1 (host to device)");
        assert_eq!(row_name(3, Lane::DeviceToHost), "gpu(3) stream 2 (device to host)");
        // Without a driver nothing can be timed, and nothing fails.
        if runtime().is_err() {
            assert!(begin(0, Lane::Compute).is_none());
            report(Vec::new());
        }
    }
}
