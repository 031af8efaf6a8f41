//! One GPU as the backend uses it: its primary context, three NON_BLOCKING streams (compute,
//! host→device, device→host: copies in each direction overlap each other and the kernels),
//! peer access to every other GPU, and the completion thread that finishes ops when their
//! events fire. Opened at first use, for the rest of the process.

use super::completion::{CompletionThread, Event};
use super::driver::{runtime, Handle, Runtime};
use once_cell::sync::{Lazy, OnceCell};
use std::os::raw::c_uint;

/// `CU_STREAM_NON_BLOCKING`: no implicit synchronisation with the legacy default stream.
const CU_STREAM_NON_BLOCKING: c_uint = 1;
/// `CU_EVENT_DISABLE_TIMING`: the cheapest event, for completion only.
const CU_EVENT_DISABLE_TIMING: c_uint = 2;
/// `CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED`.
const PEER_ACCESS_ALREADY_ENABLED: i32 = 704;

/// Which of a device's streams work goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    /// Kernels and copies between devices.
    Compute = 0,
    /// Host to device copies.
    HostToDevice = 1,
    /// Device to host copies.
    DeviceToHost = 2,
}

/// Events recorded at the end of an op's work, on every stream it used.
pub struct Events(Vec<(i32, usize)>);

impl Events {
    /// The `i`-th event's handle.
    pub(crate) fn handle(&self, i: usize) -> Handle {
        self.0[i].1 as Handle
    }
}

impl Event for Events {
    fn wait(&self) -> Result<(), String> {
        let rt = runtime()?;
        let mut outcome = Ok(());
        for &(ordinal, event) in &self.0 {
            let r = rt.with_context(ordinal, |api| {
                // SAFETY: an event recorded by `record_events`, destroyed only in `drop`.
                rt.check(ordinal, "cuEventSynchronize", unsafe { (api.event_synchronize)(event as Handle) })
            });
            if outcome.is_ok() {
                outcome = r;
            }
        }
        outcome
    }
}

impl Drop for Events {
    fn drop(&mut self) {
        let Ok(rt) = runtime() else { return };
        for &(ordinal, event) in &self.0 {
            // Back to its device's pool: recorded again by a later op (no driver call here).
            if let Ok(dev) = device(ordinal) {
                dev.idle_events.lock().push(event);
                continue;
            }
            let _ = rt.with_context(ordinal, |api| {
                // SAFETY: created by cuEventCreate, waited for (or abandoned), destroyed once.
                rt.check(ordinal, "cuEventDestroy", unsafe { (api.event_destroy)(event as Handle) })
            });
        }
    }
}

/// An opened GPU.
pub struct Device {
    /// `gpu(ordinal)`.
    pub ordinal: i32,
    streams: [usize; 3],
    completion: CompletionThread<Events>,
    /// Completion events whose op has completed, kept for later ops: creating and destroying
    /// one per op costs two driver calls more per op.
    idle_events: parking_lot::Mutex<Vec<usize>>,
}

static DEVICES: Lazy<Vec<OnceCell<Device>>> =
    Lazy::new(|| (0..runtime().map_or(0, |rt| rt.devices.len())).map(|_| OnceCell::new()).collect());

/// `gpu(ordinal)`, opened at first use (its peers' access enabled then too).
pub fn device(ordinal: i32) -> Result<&'static Device, String> {
    let rt = runtime()?;
    rt.device(ordinal)?;
    DEVICES[ordinal as usize].get_or_try_init(|| open(rt, ordinal))
}

/// Whether `MXNET_ENABLE_GPU_P2P` (default on, as MXNet) allows peer access.
fn p2p_enabled() -> bool {
    std::env::var("MXNET_ENABLE_GPU_P2P").map_or(true, |v| v.trim() != "0")
}

fn open(rt: &'static Runtime, ordinal: i32) -> Result<Device, String> {
    let streams = rt.with_context(ordinal, |api| {
        let mut streams = [0usize; 3];
        for s in &mut streams {
            let mut h: Handle = std::ptr::null_mut();
            // SAFETY: the device's context is current; valid out-pointer. Streams live for the process.
            rt.check(ordinal, "cuStreamCreate", unsafe { (api.stream_create)(&mut h, CU_STREAM_NON_BLOCKING) })?;
            *s = h as usize;
        }
        Ok(streams)
    })?;
    if p2p_enabled() {
        enable_peer_access(rt, ordinal);
    }
    let completion = CompletionThread::start(&format!("kvstore-gpu{ordinal}-completion"))
        .map_err(|e| format!("gpu({ordinal}): starting its completion thread failed: {e}"))?;
    Ok(Device { ordinal, streams, completion, idle_events: parking_lot::Mutex::new(Vec::new()) })
}

/// Lets `ordinal` and every other device read each other's memory where the hardware allows
/// (MXNet's `EnableP2P`). Best effort, pair by pair: copies between devices work without it
/// (the driver stages them), and a peer whose context has failed must not make this device
/// unusable.
fn enable_peer_access(rt: &Runtime, ordinal: i32) {
    for peer in (0..rt.devices.len() as i32).filter(|p| *p != ordinal) {
        for (from, to) in [(ordinal, peer), (peer, ordinal)] {
            let mut can = 0;
            // SAFETY: valid ordinals (device handles equal ordinals in CUDA 12); valid out-pointer.
            let asked = unsafe { (rt.api.device_can_access_peer)(&mut can, from, to) };
            let Ok(peer_ctx) = rt.primary_context(to) else { continue };
            if asked != 0 || can == 0 {
                continue;
            }
            let _ = rt.with_context(from, |api| {
                // SAFETY: `from`'s context is current; `peer_ctx` a retained primary context.
                let code = unsafe { (api.ctx_enable_peer_access)(peer_ctx, 0) };
                if code == PEER_ACCESS_ALREADY_ENABLED { Ok(()) } else { rt.check(from, "cuCtxEnablePeerAccess", code) }
            });
        }
    }
}

impl Device {
    /// The stream of `lane`.
    pub(crate) fn stream(&self, lane: Lane) -> Handle {
        self.streams[lane as usize] as Handle
    }

    /// Records an event on each of `streams` (this device's lanes or others'), to hand to
    /// [`Device::complete_after`].
    pub(crate) fn record_events(streams: &[(i32, Lane)]) -> Result<Events, String> {
        let rt = runtime()?;
        let mut events = Events(Vec::with_capacity(streams.len()));
        for &(ordinal, lane) in streams {
            let dev = device(ordinal)?;
            let stream = dev.stream(lane);
            let idle = dev.idle_events.lock().pop();
            let event = rt.with_context(ordinal, |api| {
                let e = match idle {
                    Some(e) => e as Handle,
                    None => {
                        let mut e: Handle = std::ptr::null_mut();
                        // SAFETY: the device's context is current; valid out-pointer.
                        rt.check(ordinal, "cuEventCreate", unsafe { (api.event_create)(&mut e, CU_EVENT_DISABLE_TIMING) })?;
                        e
                    }
                };
                // SAFETY: an event of this device (fresh, or one whose last recording was
                // waited for) and one of the device's streams.
                let recorded = rt.check(ordinal, "cuEventRecord", unsafe { (api.event_record)(e, stream) });
                if let Err(err) = recorded {
                    // SAFETY: the event's failed recording leaves nothing waiting on it.
                    unsafe { (api.event_destroy)(e) };
                    return Err(err);
                }
                Ok(e as usize)
            })?;
            events.0.push((ordinal, event));
        }
        Ok(events)
    }

    /// Runs `then` on this device's completion thread once `events` fired, then drops
    /// `keep_alive` (the arrays the work touches).
    pub(crate) fn complete_after(
        &self,
        events: Events,
        then: super::completion::Completion,
        keep_alive: Box<dyn Send>,
    ) -> Result<(), String> {
        self.completion.submit(events, then, keep_alive)
    }
}
