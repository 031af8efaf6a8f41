//! Asynchronous ops in the host's engine (`MXEnginePushAsyncND`): an op that declares the host
//! arrays it reads and writes, starts on a host engine thread once the ops before it on those
//! arrays are done (inline on the calling thread under MXNet's NaiveEngine), and completes
//! later, from any thread, when its [`HostDone`] is finished or dropped. The host's later
//! writers of what it reads, and readers of what it writes, wait for that completion.
//!
//! The start must not block: the host has few engine threads, and NaiveEngine runs it on the
//! caller's thread, which then waits for the completion.

use super::host::{Host, HostContext, CPU0};
use crate::ffi::NDArrayHandle;
use crate::Result;
use std::ffi::CStr;
use std::os::raw::{c_int, c_void};

/// MXNet 1.9's `CallbackOnComplete` (`{callback, engine, param}`), which the engine hands the
/// op on the stack: it is copied out before the start returns.
#[repr(C)]
#[derive(Clone, Copy)]
struct OnComplete {
    callback: unsafe extern "C" fn(*mut c_void, *mut c_void, *const c_void),
    engine: *mut c_void,
    param: *mut c_void,
}

/// The completion of a host op started by [`push_async`]: finishing it completes the op, from
/// whichever thread does it; failing it (or dropping it, so that a start that panics or loses
/// it cannot leave the host's engine waiting forever) completes it with a failure, which the
/// host keeps on the arrays the op writes and reports at the next wait on them.
pub(super) struct HostDone(Option<OnComplete>);

// SAFETY: MXNet's engines accept an op's completion from any thread (the prototype of the
// hosted store and tests/hosted's ordering proofs complete ops from libkvstore's threads).
unsafe impl Send for HostDone {}

impl HostDone {
    pub fn finish(mut self) {
        if let Some(c) = self.0.take() {
            // SAFETY: the engine's own callback with its own arguments, called once; no error.
            unsafe { (c.callback)(c.engine, c.param, std::ptr::null()) }
        }
    }

    /// Completes the op with a failure saying `message`. Where the host's failure object
    /// cannot be built (see `host_error`), or under MXNet's NaiveEngine (which drops op
    /// failures), the op completes without it: callers also record the failure for the
    /// store's next call.
    pub fn fail(mut self, message: &str) {
        self.fail_now(message);
    }

    fn fail_now(&mut self, message: &str) {
        let Some(c) = self.0.take() else { return };
        match super::host().and_then(|h| h.errors) {
            // SAFETY: the engine's own callback with its own arguments, called once, with a
            // live dmlc::Error that outlives the call (the engine copies it).
            Some(errors) => errors.with_error(message, |error| unsafe { (c.callback)(c.engine, c.param, error) }),
            // SAFETY: as in `finish`.
            None => unsafe { (c.callback)(c.engine, c.param, std::ptr::null()) },
        }
    }
}

impl Drop for HostDone {
    fn drop(&mut self) {
        self.fail_now("libkvstore's op ended without completing (internal error)");
    }
}

type Start = Box<dyn FnOnce(HostDone) + Send>;

unsafe extern "C" fn run_start(_run_context: *mut c_void, on_complete: *mut c_void, param: *mut c_void) {
    // SAFETY: the engine passes a live `CallbackOnComplete` (MXNet 1.9's layout, checked by the
    // host's version at load) and the `Option<Start>` pushed with this function, which it
    // calls once.
    let (done, start) = unsafe {
        let done = HostDone(Some(*(on_complete as *const OnComplete)));
        (done, (*(param as *mut Option<Start>)).take())
    };
    match start {
        // A panic drops `done`, which fails the op.
        Some(start) => {
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || start(done)));
        }
        None => done.fail("libkvstore's op ran twice (internal error)"),
    }
}

unsafe extern "C" fn free_start(param: *mut c_void) {
    // SAFETY: the `Box<Option<Start>>` leaked when it was pushed; the engine frees it once.
    unsafe { drop(Box::from_raw(param as *mut Option<Start>)) }
}

/// MXNet 1.9's `FnProperty`: the host's worker pool an op runs on.
#[derive(Clone, Copy)]
#[repr(i32)]
pub(super) enum Property {
    /// `kNormal`, as MXNet's own dist store pushes and pulls.
    Normal = 0,
    /// `kCPUPrioritized`: run by the host's CPU priority workers, not queued behind the normal
    /// workers' ops (for ops that only take hold of their arrays).
    Prompt = 3,
}

/// Pushes one asynchronous host op reading `reads` and writing `writes`; `start` runs once
/// they are ready and hands on the [`HostDone`] that completes the op. Returns once queued.
pub(super) fn push_async(
    host: &Host,
    reads: &[NDArrayHandle],
    writes: &[NDArrayHandle],
    priority: c_int,
    (name, property): (&CStr, Property),
    start: impl FnOnce(HostDone) + Send + 'static,
) -> Result<()> {
    let property = property as c_int;
    let mut reads = reads.to_vec();
    let mut writes = writes.to_vec();
    let start: Start = Box::new(start);
    let param = Box::into_raw(Box::new(Some(start)));
    // SAFETY: MXEnginePushAsyncND with live handle arrays (read during the call), MXNet 1.9's
    // Context and FnProperty values, and a param the engine frees with free_start.
    let rc = unsafe {
        (host.api.push_async_nd)(
            Some(run_start),
            param as *mut c_void,
            Some(free_start),
            &CPU0 as *const HostContext as *const c_void,
            reads.as_mut_ptr(),
            reads.len() as c_int,
            writes.as_mut_ptr(),
            writes.len() as c_int,
            &property as *const c_int as *const c_void,
            priority,
            name.as_ptr(),
            false,
        )
    };
    host.check(rc, "MXEnginePushAsyncND")
}
