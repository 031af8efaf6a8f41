//! Turns between the two engines over shared arrays: memory that is a native array for
//! libkvstore's engine and a host array for the host's (`HostArray::over_native`). Neither
//! engine knows the other's ops, so a [`host_turn`] hands the arrays to the host and back
//! with four ops, none of which blocks a thread:
//!
//! 1. a native op writing the arrays, queued after the native ops already on them, which says
//!    "native is done" when it runs;
//! 2. a host op writing them, which completes only once (1) has said so: the host ops queued
//!    next (the turn's own) wait for every earlier native use (where native has nothing
//!    pending on the arrays, (1) and (2) are left out);
//! 3. the turn's host ops (copies, an updater's optimizer ops);
//! 4. a native op writing the arrays, which completes only once a host op reading them,
//!    queued after (3), has run: later native ops wait for the turn's host ops.
//!
//! A failure on either side crosses over: a native failure on the arrays fails (2), so the
//! host reports it on what its ops write; a host failure on them fails (4), so the native
//! store keeps it on the arrays and reports it at the next wait.

use super::async_op::{push_async, HostDone, Property};
use super::host::Host;
use crate::engine::{engine, OpDone};
use crate::ffi::NDArrayHandle;
use crate::{NDArray, Result};
use parking_lot::Mutex;
use std::ffi::CStr;
use std::os::raw::c_int;
use std::sync::Arc;

/// The completion an op waits on: the host op (2) or the native op (4).
trait Completion: Send + 'static {
    fn complete(self, outcome: std::result::Result<(), String>);
}

impl Completion for HostDone {
    fn complete(self, outcome: std::result::Result<(), String>) {
        match outcome {
            Ok(()) => self.finish(),
            Err(why) => self.fail(&why),
        }
    }
}

impl Completion for OpDone {
    fn complete(self, outcome: std::result::Result<(), String>) {
        self.finish(outcome.map_err(crate::Error::new))
    }
}

enum Meeting<D> {
    Nobody,
    Outcome(std::result::Result<(), String>),
    Waiting(D),
    Over,
}

/// Where one side's outcome meets the other side's waiting op, in either order.
struct Meet<D>(Mutex<Meeting<D>>);

impl<D: Completion> Meet<D> {
    fn new() -> Arc<Meet<D>> {
        Arc::new(Meet(Mutex::new(Meeting::Nobody)))
    }

    fn outcome(&self, outcome: std::result::Result<(), String>) {
        let mut m = self.0.lock();
        match std::mem::replace(&mut *m, Meeting::Over) {
            Meeting::Waiting(done) => {
                drop(m);
                done.complete(outcome);
            }
            Meeting::Nobody => *m = Meeting::Outcome(outcome),
            // The first outcome stands.
            other => *m = other,
        }
    }

    fn waiting(&self, done: D) {
        let mut m = self.0.lock();
        match std::mem::replace(&mut *m, Meeting::Over) {
            Meeting::Outcome(outcome) => {
                drop(m);
                done.complete(outcome);
            }
            Meeting::Nobody => *m = Meeting::Waiting(done),
            other => {
                *m = other;
                drop(m);
                done.complete(Err("libkvstore's engine handover completed twice (internal error)".into()));
            }
        }
    }
}

/// One side's outcome, given when its op runs, or (dropped unrun: the op was skipped because
/// of a failure on its arrays, or never queued) the failure `why()` finds.
struct Outcome<D: Completion, F: Fn() -> String + Send + 'static> {
    meet: Arc<Meet<D>>,
    why: F,
    given: bool,
}

impl<D: Completion, F: Fn() -> String + Send + 'static> Outcome<D, F> {
    fn give(mut self) {
        self.given = true;
        self.meet.outcome(Ok(()));
    }
}

impl<D: Completion, F: Fn() -> String + Send + 'static> Drop for Outcome<D, F> {
    fn drop(&mut self) {
        if !self.given {
            self.meet.outcome(Err((self.why)()));
        }
    }
}

/// Hands `arrays` (each a native array and a host handle over the same memory) to the host
/// for `host_ops`, then back: see the module's text. `name` names the host op that ends
/// the turn (the one every turn has), as MXNet's profiler shows it. Returns once everything is queued; an error of
/// `host_ops` is returned after the arrays are handed back.
pub(super) fn host_turn(
    host: &Host,
    name: &'static CStr,
    arrays: &[(NDArray, NDArrayHandle)],
    priority: c_int,
    host_ops: impl FnOnce() -> Result<()>,
) -> Result<()> {
    if arrays.is_empty() {
        return host_ops();
    }
    let natives: Vec<NDArray> = arrays.iter().map(|(n, _)| n.clone()).collect();
    let handles: Vec<NDArrayHandle> = arrays.iter().map(|(_, h)| *h).collect();

    // (1) and (2): the host's turn starts after native's; at once where nothing of native's
    // is pending on the arrays (nothing else queues on them while the caller holds them).
    let vars: Vec<_> = natives.iter().map(|a| a.var()).collect();
    let queued_start = if engine().idle(&vars) {
        Ok(())
    } else {
        let to_host = Meet::<HostDone>::new();
        let failed_natives = natives.clone();
        let native_done = Outcome {
            meet: Arc::clone(&to_host),
            why: move || {
                let vars: Vec<_> = failed_natives.iter().map(|a| a.var()).collect();
                engine().failure_on(&vars).unwrap_or_else(|| "libkvstore's op on the array did not run".into())
            },
            given: false,
        };
        // Tiny: it runs on this thread when nothing is pending, rather than waking a worker.
        engine().push_batch(&[], &vars, priority, true, move |_| {
            native_done.give();
            Ok(())
        });
        let meet = Arc::clone(&to_host);
        push_async(host, &[], &handles, priority, (c"KVStoreHandOver", Property::Normal), move |done| meet.waiting(done))
    };

    let ran = queued_start.and_then(|()| host_ops());

    // (3) is queued; (4): native's next turn starts after the host's ops.
    let to_native = Meet::<OpDone>::new();
    let meet = Arc::clone(&to_native);
    engine().push_async(&[], &vars, priority, move |_, done| meet.waiting(done));
    let host_done = Outcome {
        meet: Arc::clone(&to_native),
        why: || "the host's ops on libkvstore's array failed".to_string(),
        given: false,
    };
    // Shared so that a push the host refuses (its closure then never runs) still completes
    // the native op here.
    let host_done = Arc::new(Mutex::new(Some(host_done)));
    let in_op = Arc::clone(&host_done);
    let queued_end = push_async(host, &handles, &[], priority, (name, Property::Normal), move |done| {
        done.finish();
        if let Some(o) = in_op.lock().take() {
            o.give();
        }
    });
    if queued_end.is_err() {
        drop(host_done.lock().take());
    }
    ran.and(queued_end)
}
