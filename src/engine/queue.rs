//! The ready queue: ops whose dependencies have finished, highest priority first, then FIFO.

use super::Op;
use parking_lot::{Condvar, Mutex};
use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::sync::Arc;

struct Ready {
    priority: i32,
    seq: u64,
    op: Arc<Op>,
}

impl PartialEq for Ready {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Ready {}
impl PartialOrd for Ready {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Ready {
    fn cmp(&self, other: &Self) -> Ordering {
        // Max-heap: higher priority first; among equals, the earlier (smaller seq) first.
        self.priority.cmp(&other.priority).then_with(|| other.seq.cmp(&self.seq))
    }
}

pub(crate) struct ReadyQueue {
    heap: Mutex<(BinaryHeap<Ready>, u64)>,
    available: Condvar,
}

impl ReadyQueue {
    pub(crate) fn new() -> ReadyQueue {
        ReadyQueue { heap: Mutex::new((BinaryHeap::new(), 0)), available: Condvar::new() }
    }

    pub(crate) fn push(&self, op: Arc<Op>) {
        let mut q = self.heap.lock();
        let seq = q.1;
        q.1 += 1;
        q.0.push(Ready { priority: op.priority, seq, op });
        drop(q);
        self.available.notify_one();
    }

    /// Ops waiting for a worker.
    pub(crate) fn len(&self) -> usize {
        self.heap.lock().0.len()
    }

    pub(crate) fn pop(&self) -> Arc<Op> {
        let mut q = self.heap.lock();
        loop {
            if let Some(r) = q.0.pop() {
                return r.op;
            }
            self.available.wait(&mut q);
        }
    }
}
