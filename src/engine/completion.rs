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
}

#[derive(Default)]
struct State {
    done: bool,
    waiters: Vec<Arc<Op>>,
}

impl Completion {
    pub(crate) fn new() -> Completion {
        Completion { state: Mutex::new(State::default()), finished: Condvar::new(), done: AtomicBool::new(false) }
    }

    pub(crate) fn is_done(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }

    /// Makes `op` wait for this completion; false if it has already finished.
    pub(crate) fn add_waiter(&self, op: &Arc<Op>) -> bool {
        let mut s = self.state.lock();
        if s.done {
            return false;
        }
        s.waiters.push(Arc::clone(op));
        true
    }

    /// Marks the op finished; returns the ops that were waiting for it.
    pub(crate) fn complete(&self) -> Vec<Arc<Op>> {
        let mut s = self.state.lock();
        s.done = true;
        self.done.store(true, Ordering::Release);
        self.finished.notify_all();
        std::mem::take(&mut s.waiters)
    }

    /// Blocks until the op has finished.
    pub(crate) fn wait(&self) {
        let mut s = self.state.lock();
        while !s.done {
            self.finished.wait(&mut s);
        }
    }
}
