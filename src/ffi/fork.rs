//! A child forked from a process that used libkvstore. Only the forking thread survives a
//! fork: the engine's workers are gone (an op scheduled in the child would never run, and a
//! wait for it would hang), ops the parent had scheduled never complete, and a lock another
//! thread held at the fork (the handle registry's, an array's, the engine's queues) stays
//! held forever. So in such a child every call that reaches library state answers -1 at
//! once with a message saying why; calls that read none (version, features, GPU count and
//! memory, which refuses CUDA in a forked child by itself) still answer. A child forked
//! before the first call, or one that execs, is unaffected.
//!
//! MXNet instead stops its engine in a `pthread_atfork` prepare handler (waiting for every
//! op) and restarts it in parent and child. That waits, inside `fork()`, for work another
//! thread keeps scheduling, and still leaves array locks held by threads inside synchronous
//! calls; refusing is the sound answer here.

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::Once;

/// Set by the first call into the library.
static USED: AtomicBool = AtomicBool::new(false);
/// Set in a child forked after the first call.
static FORKED: AtomicBool = AtomicBool::new(false);
/// The process that used the library, for the message.
static USER_PID: AtomicI32 = AtomicI32::new(0);

/// Runs only atomic stores: a fork handler may call only async-signal-safe functions.
extern "C" fn in_child() {
    if USED.load(Ordering::Relaxed) {
        FORKED.store(true, Ordering::Relaxed);
    }
}

/// Records that the library is in use (registering the fork handler once), then fails in a
/// forked child unless the export (`name`, asked only in such a child) reads no library state.
pub(crate) fn check(name: impl FnOnce() -> &'static str) -> crate::error::Result<()> {
    if !USED.load(Ordering::Relaxed) {
        static REGISTER: Once = Once::new();
        REGISTER.call_once(|| {
            USER_PID.store(std::process::id() as i32, Ordering::Relaxed);
            // SAFETY: `in_child` is an `extern "C" fn()` with no preconditions that only
            // stores to atomics; pthread_atfork copies the pointers.
            unsafe {
                libc::pthread_atfork(None, None, Some(in_child));
            }
        });
        USED.store(true, Ordering::Relaxed);
    }
    if FORKED.load(Ordering::Relaxed) && !STATELESS.contains(&name()) {
        crate::bail!(
            "libkvstore was in use in process {} when it forked; this child (pid {}) cannot use it: \
             the library's worker threads did not survive the fork and its locks may be held forever. \
             Fork before the first libkvstore call, or exec in the child",
            USER_PID.load(Ordering::Relaxed),
            std::process::id()
        );
    }
    Ok(())
}

/// Exports that read no library state, which answer in a forked child.
const STATELESS: &[&str] =
    &["MXGetVersion", "MXLibInfoFeatures", "MXGetGPUCount", "MXGetGPUMemoryInformation", "MXGetGPUMemoryInformation64"];
