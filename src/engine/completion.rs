//! The completion of one operation: a flag, a condition variable for threads that block on it,
//! and the ops that wait for it.

use super::Op;
use parking_lot::{Condvar, Mutex};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

pub(crate) struct Completion {
    state: Mutex<State>,
    finished: Condvar,
    // Mirrors `state.done` so that registration can skip finished ops without locking.
    done: AtomicBool,
    /// The op's work runs on a device: a thread waiting for it spins a little first.
    device: bool,
}

#[derive(Default)]
struct State {
    done: bool,
    waiters: Vec<Arc<Op>>,
    /// The device stream the op's work was enqueued on, once all of it is (see
    /// [`Completion::enqueued`]).
    enqueued_on: Option<u64>,
}

/// What [`Completion::add_waiter`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wait {
    /// The op has finished: nothing to wait for.
    Finished,
    /// The waiter is released when the op finishes.
    Added,
    /// The op's work is enqueued on the waiter's stream, which orders the waiter's work after
    /// it: the waiter need not wait.
    StreamOrdered,
}

impl Completion {
    pub(crate) fn new(device: bool) -> Completion {
        Completion { state: Mutex::new(State::default()), finished: Condvar::new(), done: AtomicBool::new(false), device }
    }

    pub(crate) fn is_done(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }

    /// How many waiter entries it holds (an op waiting twice counts twice).
    #[cfg(test)]
    pub(crate) fn waiter_entries(&self) -> usize {
        self.state.lock().waiters.len()
    }

    /// Makes `op` wait for this completion, unless it has finished or `op`'s work is ordered
    /// after it on a device stream.
    pub(crate) fn add_waiter(&self, op: &Arc<Op>) -> Wait {
        let mut s = self.state.lock();
        if s.done {
            return Wait::Finished;
        }
        if s.enqueued_on.is_some() && s.enqueued_on == op.stream {
            return Wait::StreamOrdered;
        }
        s.waiters.push(Arc::clone(op));
        Wait::Added
    }

    /// Records that the op's device work is all enqueued on `stream`, and takes the waiters
    /// whose work goes to the same stream: the stream runs theirs after it (none once the op
    /// has finished: `complete` released them all).
    pub(crate) fn enqueued(&self, stream: u64) -> Vec<Arc<Op>> {
        let mut s = self.state.lock();
        if s.done {
            return Vec::new();
        }
        s.enqueued_on = Some(stream);
        let (ordered, waiting): (Vec<Arc<Op>>, Vec<Arc<Op>>) = std::mem::take(&mut s.waiters).into_iter().partition(|w| w.stream == Some(stream));
        s.waiters = waiting;
        ordered
    }

    /// Marks the op finished, runs `retire` (the op's mark given back), and returns the ops
    /// that were waiting for it. A thread that [`Completion::wait`]ed returns after `retire`:
    /// its next registration finds the op finished by its mark too.
    pub(crate) fn complete(&self, retire: impl FnOnce()) -> Vec<Arc<Op>> {
        let mut s = self.state.lock();
        s.done = true;
        self.done.store(true, Ordering::Release);
        retire();
        self.finished.notify_all();
        std::mem::take(&mut s.waiters)
    }

    /// Blocks until the op has finished.
    pub(crate) fn wait(&self) {
        if self.device {
            spin_until(|| self.is_done());
        }
        let mut s = self.state.lock();
        while !s.done {
            self.finished.wait(&mut s);
        }
    }
}

/// How long a thread waiting for device work polls before it sleeps: about what a small op
/// takes on a GPU, and less than a sleeping thread's wake-up costs on a VM.
const SPIN: std::time::Duration = std::time::Duration::from_micros(100);

/// Polls `ready` for up to [`SPIN`]; whether it became true. Used only while the awaited work
/// runs on a device (a completion thread finishes it), so the spin takes no CPU from an op.
pub(crate) fn spin_until(ready: impl Fn() -> bool) -> bool {
    let start = std::time::Instant::now();
    loop {
        for _ in 0..64 {
            if ready() {
                return true;
            }
            std::hint::spin_loop();
        }
        if start.elapsed() >= SPIN {
            return ready();
        }
    }
}
