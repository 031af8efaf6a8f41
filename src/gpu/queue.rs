//! One op's GPU work: copies, fills and launches enqueued on the devices' streams, then one
//! completion when all of it has finished ([`Queue::finish`]: events on every stream used,
//! waited for by the completion thread, never by the caller). A failure to enqueue stops the
//! queue; what was already enqueued is still waited for before the op's arrays are released.

use super::completion::Completion;
use super::device::{device, Device, Lane};
use super::driver::{runtime, Api, Handle};
use super::memory::{DevicePtr, HostPtr};
use super::timing::{self, Timed};
use crate::profiler::{Arg, Args};
use std::ffi::c_void;

/// One side of a copy.
#[derive(Debug, Clone, Copy)]
pub enum Place {
    /// Device memory.
    Device(DevicePtr),
    /// Pinned host memory.
    Host(HostPtr),
}

/// The work of one op.
#[derive(Default)]
pub struct Queue {
    used: Vec<(i32, Lane)>,
    error: Option<String>,
    /// What the enqueued work reads besides the op's arrays (staged tables), kept until done.
    held: Vec<Box<dyn Send>>,
    /// The items timed for the profiler, reported when the work has finished.
    timed: Vec<Timed>,
}

impl Queue {
    /// An empty queue.
    pub fn new() -> Queue {
        Queue::default()
    }

    /// Whether an enqueue failed (later ones are skipped).
    pub fn failed(&self) -> bool {
        self.error.is_some()
    }

    /// The device whose compute stream took all of the work enqueued, if that is the one
    /// stream used and nothing failed.
    pub fn only_compute_stream(&self) -> Option<i32> {
        match (&self.used[..], &self.error) {
            ([(ordinal, Lane::Compute)], None) => Some(*ordinal),
            _ => None,
        }
    }

    /// Fails the queue with `why` (the op's own check, e.g. a refused cast).
    pub fn fail(&mut self, why: String) {
        self.error.get_or_insert(why);
    }

    /// Runs `f` on `ordinal`'s `lane` stream with its context current, unless failed.
    pub(crate) fn on(&mut self, ordinal: i32, lane: Lane, f: impl FnOnce(&Api, Handle) -> Result<(), String>) {
        self.on_item(ordinal, lane, None::<fn() -> (String, Args)>, f)
    }

    /// [`Queue::on`] for work the profiler shows (a copy, memset or launch): while it records
    /// GPU work, `f`'s call goes between two timing events and `label` names it (see
    /// [`super::timing`]). Other enqueues (scratch, waits) also take the stream's lock then, so
    /// that nothing lands between an item's events.
    fn on_item(
        &mut self,
        ordinal: i32,
        lane: Lane,
        label: Option<impl FnOnce() -> (String, Args)>,
        f: impl FnOnce(&Api, Handle) -> Result<(), String>,
    ) {
        if self.error.is_some() {
            return;
        }
        let recording = if crate::profiler::gpu_enabled() { timing::begin(ordinal, lane) } else { None };
        let result = device(ordinal).and_then(|dev: &Device| {
            let stream = dev.stream(lane);
            runtime()?.with_context(ordinal, |api| match (recording, label) {
                (Some(recording), Some(label)) => timing::around(recording, ordinal, lane, api, stream, label, f),
                // Without a label, the stream's lock (if any) is held across the call.
                (_recording, _) => f(api, stream).map(|()| None),
            })
        });
        match result {
            Ok(timed) => {
                if !self.used.contains(&(ordinal, lane)) {
                    self.used.push((ordinal, lane));
                }
                self.timed.extend(timed);
            }
            Err(e) => self.error = Some(e),
        }
    }

    /// `bytes` from `src` to `dst`: between devices on the destination's compute stream,
    /// host to device and device to host on their own streams. Host sides are pinned.
    pub fn copy(&mut self, dst: Place, src: Place, bytes: usize) {
        self.copy_on(dst, src, bytes, None)
    }

    /// [`Queue::copy`] on the device's compute stream, ordered before the kernels enqueued
    /// after it (the sources of a sum).
    pub fn copy_before_kernels(&mut self, dst: Place, src: Place, bytes: usize) {
        self.copy_on(dst, src, bytes, Some(Lane::Compute))
    }

    /// Keeps `what` alive until the work has finished.
    pub fn hold(&mut self, what: Box<dyn Send>) {
        self.held.push(what);
    }

    fn copy_on(&mut self, dst: Place, src: Place, bytes: usize, lane: Option<Lane>) {
        if bytes == 0 {
            return;
        }
        let Ok(rt) = runtime() else {
            self.fail("the CUDA driver is not usable".into());
            return;
        };
        match (dst, src) {
            (Place::Device(d), Place::Device(s)) if d.ordinal == s.ordinal => self.on_item(d.ordinal, Lane::Compute, copy_label("copy DtoD", dst, src, bytes), |api, stream| {
                // SAFETY: device ranges of live allocations (held by the op); async on the stream.
                rt.check(d.ordinal, "cuMemcpyDtoDAsync", unsafe { (api.memcpy_dtod_async)(d.addr, s.addr, bytes, stream) })
            }),
            (Place::Device(d), Place::Device(s)) => {
                let (dctx, sctx) = match (rt.primary_context(d.ordinal), rt.primary_context(s.ordinal)) {
                    (Ok(a), Ok(b)) => (a, b),
                    (Err(e), _) | (_, Err(e)) => return self.fail(e),
                };
                self.on_item(d.ordinal, Lane::Compute, copy_label("copy DtoD peer", dst, src, bytes), |api, stream| {
                    // SAFETY: as above, each address in its own device's context.
                    rt.check(d.ordinal, "cuMemcpyPeerAsync", unsafe {
                        (api.memcpy_peer_async)(d.addr, dctx, s.addr, sctx, bytes, stream)
                    })
                })
            }
            (Place::Device(d), Place::Host(h)) => self.on_item(d.ordinal, lane.unwrap_or(Lane::HostToDevice), copy_label("copy HtoD", dst, src, bytes), |api, stream| {
                // SAFETY: pinned host memory kept alive by the op until the event fired.
                rt.check(d.ordinal, "cuMemcpyHtoDAsync", unsafe { (api.memcpy_htod_async)(d.addr, h.as_ptr(), bytes, stream) })
            }),
            (Place::Host(h), Place::Device(s)) => self.on_item(s.ordinal, lane.unwrap_or(Lane::DeviceToHost), copy_label("copy DtoH", dst, src, bytes), |api, stream| {
                // SAFETY: as above.
                rt.check(s.ordinal, "cuMemcpyDtoHAsync", unsafe { (api.memcpy_dtoh_async)(h.as_ptr(), s.addr, bytes, stream) })
            }),
            (Place::Host(_), Place::Host(_)) => self.fail("internal error: a host to host copy was queued on a GPU".into()),
        }
    }

    /// Sets `bytes` bytes at `dst` to `value`.
    pub fn fill_bytes(&mut self, dst: DevicePtr, value: u8, bytes: usize) {
        if bytes == 0 {
            return;
        }
        let Ok(rt) = runtime() else { return self.fail("the CUDA driver is not usable".into()) };
        let label = || ("memset".to_string(), vec![("bytes", Arg::Int(bytes as i64)), ("to", Arg::Text(format!("gpu({})", dst.ordinal)))]);
        self.on_item(dst.ordinal, Lane::Compute, Some(label), |api, stream| {
            // SAFETY: a device range of a live allocation held by the op.
            rt.check(dst.ordinal, "cuMemsetD8Async", unsafe { (api.memset_d8_async)(dst.addr, value, bytes, stream) })
        })
    }

    /// Sets `count` 32-bit words at `dst` (4-byte aligned) to `value`.
    pub fn fill_u32(&mut self, dst: DevicePtr, value: u32, count: usize) {
        if count == 0 {
            return;
        }
        let Ok(rt) = runtime() else { return self.fail("the CUDA driver is not usable".into()) };
        let bytes = count.saturating_mul(4);
        let label = || ("memset".to_string(), vec![("bytes", Arg::Int(bytes as i64)), ("to", Arg::Text(format!("gpu({})", dst.ordinal)))]);
        self.on_item(dst.ordinal, Lane::Compute, Some(label), |api, stream| {
            // SAFETY: as `fill_bytes`.
            rt.check(dst.ordinal, "cuMemsetD32Async", unsafe { (api.memset_d32_async)(dst.addr, value, count, stream) })
        })
    }

    /// `bytes` of scratch memory on `ordinal`, ordered on its compute stream (from the
    /// driver's stream-ordered pool: no synchronisation); give it back with [`Queue::free_temp`]
    /// once the kernels using it are enqueued.
    pub fn alloc_temp(&mut self, ordinal: i32, bytes: usize) -> Option<DevicePtr> {
        let rt = runtime().ok()?;
        let mut addr = 0u64;
        self.on(ordinal, Lane::Compute, |api, stream| {
            // SAFETY: valid out-pointer; one of the device's streams.
            rt.check(ordinal, &format!("cuMemAllocAsync of {bytes} bytes"), unsafe { (api.mem_alloc_async)(&mut addr, bytes.max(1), stream) })
        });
        (!self.failed()).then_some(DevicePtr { ordinal, addr })
    }

    /// `bytes` of device memory on `ordinal` that the caller keeps from one op to the next
    /// (a sum's copy buffers, kept with its merge buffer), allocated in order on the device's
    /// compute stream as [`Queue::alloc_temp`], for work on that stream or ordered after it;
    /// freed in stream order when dropped ([`StreamMemory`]). `None` when the queue failed.
    pub fn alloc_owned(&mut self, ordinal: i32, bytes: usize) -> Option<StreamMemory> {
        if self.error.is_some() {
            return None;
        }
        let ptr = self.alloc_temp(ordinal, bytes)?;
        Some(StreamMemory { ptr, len: bytes })
    }

    /// Frees scratch memory after the work enqueued so far on the compute stream.
    pub fn free_temp(&mut self, ptr: DevicePtr) {
        let Ok(rt) = runtime() else { return };
        // Freed even after a failure: the allocation was made.
        let failed = self.error.take();
        self.on(ptr.ordinal, Lane::Compute, |api, stream| {
            // SAFETY: allocated by `alloc_temp` on this stream, freed once, in stream order.
            rt.check(ptr.ordinal, "cuMemFreeAsync", unsafe { (api.mem_free_async)(ptr.addr, stream) })
        });
        if let Some(e) = failed {
            self.error = Some(e);
        }
    }

    /// Makes the work enqueued later on `ordinal`'s compute stream wait for what is enqueued
    /// so far on `after`'s compute stream (`cuStreamWaitEvent`: the host does not wait). The
    /// event is kept until the op's work has finished.
    pub fn order_after(&mut self, ordinal: i32, after: i32) {
        if self.error.is_some() || ordinal == after {
            return;
        }
        let events = match Device::record_events(&[(after, Lane::Compute)]) {
            Ok(e) => e,
            Err(e) => return self.fail(e),
        };
        let Ok(rt) = runtime() else { return self.fail("the CUDA driver is not usable".into()) };
        let event = events.handle(0);
        if !self.used.contains(&(after, Lane::Compute)) {
            self.used.push((after, Lane::Compute));
        }
        self.on(ordinal, Lane::Compute, |api, stream| {
            // SAFETY: an event recorded just above, alive (held below) until the work is done.
            rt.check(ordinal, "cuStreamWaitEvent", unsafe { (api.stream_wait_event)(stream, event, 0) })
        });
        self.held.push(Box::new(events));
    }

    /// Launches kernel `name` on `ordinal`'s compute stream: `grid` blocks of `block` threads,
    /// `params` pointing at each argument's value (as `cuLaunchKernel`'s kernelParams).
    /// `output` is what the profiler shows of it: the bytes and elements of what it writes.
    pub(crate) fn launch(&mut self, ordinal: i32, name: &str, grid: u32, block: u32, params: &mut [*mut c_void], output: Output) {
        if self.error.is_some() {
            return;
        }
        let (rt, f) = match (runtime(), super::module::function(ordinal, name)) {
            (Ok(rt), Ok(f)) => (rt, f),
            (Err(e), _) | (_, Err(e)) => return self.fail(e),
        };
        let label = || {
            let args = vec![
                ("bytes", Arg::Int(output.bytes as i64)),
                ("elements", Arg::Int(output.elements as i64)),
                ("grid", Arg::Int(i64::from(grid.max(1)))),
                ("block", Arg::Int(i64::from(block))),
            ];
            (format!("kernel {name}"), args)
        };
        self.on_item(ordinal, Lane::Compute, Some(label), |api, stream| {
            // SAFETY: `params` holds one pointer per parameter of `name`, each to a value of the
            // parameter's type, alive for the call (the driver copies them).
            rt.check(ordinal, &format!("cuLaunchKernel({name})"), unsafe {
                (api.launch_kernel)(f, grid.max(1), 1, 1, block, 1, 1, 0, stream, params.as_mut_ptr(), std::ptr::null_mut())
            })
        })
    }

    /// Runs `then` once everything enqueued has finished (with the first error: an enqueue's,
    /// or the driver's when the work failed), on the completion thread, then drops
    /// `keep_alive`. Never blocks; with nothing enqueued, `then` runs now.
    pub fn finish(self, then: Completion, keep_alive: Box<dyn Send>) {
        let Queue { used, error, held, timed } = self;
        let then: Completion = if timed.is_empty() {
            then
        } else {
            // Reported before the op completes, so that a dump after a wait has them.
            Box::new(move |outcome| {
                timing::report(timed);
                then(outcome)
            })
        };
        let keep_alive: Box<dyn Send> = Box::new((keep_alive, held));
        if used.is_empty() {
            then(error.map_or(Ok(()), Err));
            drop(keep_alive);
            return;
        }
        let events = match Device::record_events(&used) {
            Ok(events) => events,
            Err(e) => {
                // The work cannot be tracked: wait for it here rather than free what it uses.
                let _ = synchronize(&used);
                then(Err(error.unwrap_or(e)));
                return;
            }
        };
        let first = used[0].0;
        let then: Completion = Box::new(move |outcome| then(match error {
            Some(e) => Err(e),
            None => outcome,
        }));
        let submitted = device(first).and_then(|dev| dev.complete_after(events, then, keep_alive));
        if let Err(e) = submitted {
            let _ = synchronize(&used);
            // `then` went with the refused submission: the op's completion reports the loss.
            let _ = e;
        }
    }

    /// [`Queue::finish`], then blocks until the work finished (synchronous API calls only:
    /// the store's ops never wait).
    pub fn wait(self) -> Result<(), String> {
        let (tx, rx) = crossbeam::channel::bounded(1);
        self.finish(Box::new(move |r| { let _ = tx.send(r); }), Box::new(()));
        rx.recv().unwrap_or_else(|_| Err("the GPU completion thread stopped".into()))
    }
}

/// Device memory from [`Queue::alloc_owned`]: kept by its owner across ops, it is freed when
/// dropped, in stream order on its device's compute stream (`cuMemFreeAsync`); its owner drops
/// it only once no work uses it any more (ops hold what they use until their events fired).
#[derive(Debug)]
pub struct StreamMemory {
    ptr: DevicePtr,
    len: usize,
}

impl StreamMemory {
    /// Where it starts.
    pub fn ptr(&self) -> DevicePtr {
        self.ptr
    }

    /// Its size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for StreamMemory {
    fn drop(&mut self) {
        // In a forked child the driver is unusable: the parent's allocation is left alone.
        let Ok(rt) = runtime() else { return };
        let DevicePtr { ordinal, addr } = self.ptr;
        let Ok(dev) = device(ordinal) else { return };
        let stream = dev.stream(Lane::Compute);
        let _ = rt.with_context(ordinal, |api| {
            // SAFETY: allocated by cuMemAllocAsync in `alloc_owned`, freed once, after the
            // work that used it (its owner held it until then).
            rt.check(ordinal, "cuMemFreeAsync", unsafe { (api.mem_free_async)(addr, stream) })
        });
    }
}

/// What a launch writes, as the profiler shows it (`bytes`, `elements` of its span).
#[derive(Debug, Clone, Copy)]
pub struct Output {
    /// Bytes of the array(s) the kernel writes.
    pub bytes: usize,
    /// Elements of the array(s) the kernel writes.
    pub elements: u64,
}

fn place_name(p: Place) -> String {
    match p {
        Place::Device(d) => format!("gpu({})", d.ordinal),
        Place::Host(_) => "cpu_pinned(0)".to_string(),
    }
}

/// A copy's name and arguments in the profiler's trace.
fn copy_label(name: &'static str, dst: Place, src: Place, bytes: usize) -> Option<impl FnOnce() -> (String, Args)> {
    Some(move || {
        (name.to_string(), vec![("bytes", Arg::Int(bytes as i64)), ("from", Arg::Text(place_name(src))), ("to", Arg::Text(place_name(dst)))])
    })
}

/// Waits on the calling thread for the streams (a fallback when events cannot be recorded).
fn synchronize(used: &[(i32, Lane)]) -> Result<(), String> {
    let rt = runtime()?;
    for &(ordinal, lane) in used {
        let stream = device(ordinal)?.stream(lane);
        rt.with_context(ordinal, |api| {
            // SAFETY: one of the device's streams.
            rt.check(ordinal, "cuStreamSynchronize", unsafe { (api.stream_synchronize)(stream) })
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_queue_completes_at_once_and_a_failed_one_reports_its_first_error() {
        let (tx, rx) = std::sync::mpsc::channel();
        let t = tx.clone();
        Queue::new().finish(Box::new(move |r| t.send(r).unwrap()), Box::new(()));
        assert_eq!(rx.try_recv().unwrap(), Ok(()));
        let mut q = Queue::new();
        q.fail("first".into());
        q.fail("second".into());
        assert!(q.failed());
        // Nothing is enqueued after a failure (and nothing reaches a driver).
        q.fill_bytes(DevicePtr { ordinal: 0, addr: 0x1000 }, 0, 16);
        q.finish(Box::new(move |r| tx.send(r).unwrap()), Box::new(()));
        assert_eq!(rx.try_recv().unwrap(), Err("first".to_string()));
        assert_eq!(Queue::new().wait(), Ok(()));
    }
}
