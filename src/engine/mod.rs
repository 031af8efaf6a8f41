//! The dependency engine: operations declare the variables (storage chunks) they read and
//! write; an operation runs on a worker thread once every earlier operation that writes what it
//! touches, or reads what it writes, has finished. This is MXNet's engine contract: calls return
//! after scheduling, work on one array runs in call order, and reads wait for pending writes.

mod completion;
mod queue;

use completion::Completion;
use parking_lot::{Condvar, Mutex};
use queue::ReadyQueue;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use once_cell::sync::Lazy;

/// The unit of dependency tracking: one per storage chunk.
#[derive(Default)]
pub struct Var {
    state: Mutex<VarState>,
}

#[derive(Default)]
struct VarState {
    last_write: Option<Arc<Completion>>,
    reads_since_write: Readers,
}

/// The unfinished reads of a variable since its last write. Nearly always one op (the batch
/// that last read it), kept inline: registration touches thousands of variables per call,
/// and a separate heap block per variable would cost a cache miss each.
#[derive(Default)]
struct Readers {
    first: Option<Arc<Completion>>,
    more: Vec<Arc<Completion>>,
}

impl Readers {
    /// Drops the finished reads.
    fn prune(&mut self) {
        if self.first.as_ref().is_some_and(|c| c.is_done()) {
            self.first = None;
        }
        if !self.more.is_empty() {
            self.more.retain(|c| !c.is_done());
        }
        if self.first.is_none() {
            self.first = self.more.pop();
        }
    }

    /// Whether `op` is the read added last (the variable is listed twice).
    fn ends_with(&self, op: &Arc<Completion>) -> bool {
        self.more.last().or(self.first.as_ref()).is_some_and(|c| Arc::ptr_eq(c, op))
    }

    /// Adds `op`'s read.
    fn add(&mut self, op: &Arc<Completion>) {
        match self.first {
            None => self.first = Some(Arc::clone(op)),
            Some(_) => self.more.push(Arc::clone(op)),
        }
    }

    /// Takes every read, leaving none.
    fn take_all(&mut self) -> impl Iterator<Item = Arc<Completion>> {
        self.first.take().into_iter().chain(std::mem::take(&mut self.more))
    }
}

impl Var {
    /// A variable with no pending operation.
    pub fn new() -> Var {
        Var::default()
    }
}

type Work = Box<dyn FnOnce() + Send + 'static>;

/// An operation waiting for its dependencies, then for a worker.
pub(crate) struct Op {
    /// Dependencies not yet finished, plus one while the op is being registered.
    remaining: AtomicUsize,
    work: Mutex<Option<Work>>,
    priority: i32,
    completion: Arc<Completion>,
}

/// The engine: a scheduling lock, a ready queue and worker threads.
pub struct Engine {
    // Dependency capture and registration must be atomic across all of an op's variables, or
    // two ops scheduled at once on crossed variables could wait for each other.
    schedule_lock: Mutex<()>,
    ready: ReadyQueue,
    outstanding: Mutex<usize>,
    all_done: Condvar,
    /// Worker threads running; with none (spawning failed), ready ops run on the thread that
    /// made them ready.
    workers: AtomicUsize,
    /// Ops executing right now.
    running: AtomicUsize,
}

static ENGINE: Lazy<Arc<Engine>> = Lazy::new(|| {
    let engine = Arc::new(Engine {
        schedule_lock: Mutex::new(()),
        ready: ReadyQueue::new(),
        outstanding: Mutex::new(0),
        all_done: Condvar::new(),
        workers: AtomicUsize::new(0),
        running: AtomicUsize::new(0),
    });
    for i in 0..worker_count() {
        let e = Arc::clone(&engine);
        // A worker that cannot be spawned leaves fewer workers; with none at all, ops run
        // inline (see `Engine::release`).
        let spawned = std::thread::Builder::new().name(format!("kvstore-worker-{i}")).spawn(move || e.work_loop());
        if spawned.is_ok() {
            engine.workers.fetch_add(1, Ordering::Relaxed);
        }
    }
    engine
});

fn worker_count() -> usize {
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    std::env::var("MXNET_CPU_WORKER_NTHREADS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|&n| n > 0)
        .unwrap_or(cores.max(2))
}

/// The process-wide engine.
pub fn engine() -> &'static Engine {
    &ENGINE
}

/// Asks for the variable a few places after `i`: each is on its own cache line, usually not
/// in this core's cache, and its lock would otherwise wait for each miss in turn.
#[inline(always)]
fn prefetch_ahead(vars: &[&Var], i: usize) {
    const AHEAD: usize = 8;
    if let Some(v) = vars.get(i + AHEAD) {
        crate::base::prefetch::prefetch_line(&v.state);
    }
}

impl Engine {
    /// Registers an op reading `reads` and writing `writes` (either may list a variable more
    /// than once, or in both); returns its completion, the completions it must wait for, and
    /// whether its variables are disjoint: none written twice, none both read and written.
    fn register(&self, reads: &[&Var], writes: &[&Var]) -> (Arc<Completion>, Vec<Arc<Completion>>, bool) {
        let completion = Arc::new(Completion::new());
        let mut deps = Vec::new();
        let mut disjoint = true;
        let is_mine = |c: &Option<Arc<Completion>>| c.as_ref().is_some_and(|c| Arc::ptr_eq(c, &completion));
        let _guard = self.schedule_lock.lock();
        // Writes first: a variable this op also reads, or lists twice, then shows this op as
        // its last writer, which the checks below recognise.
        for (i, var) in writes.iter().enumerate() {
            prefetch_ahead(writes, i);
            let mut s = var.state.lock();
            if is_mine(&s.last_write) {
                disjoint = false;
                continue;
            }
            deps.extend(s.last_write.take().filter(|w| !w.is_done()));
            deps.extend(s.reads_since_write.take_all().filter(|r| !r.is_done()));
            s.last_write = Some(Arc::clone(&completion));
        }
        for (i, var) in reads.iter().enumerate() {
            prefetch_ahead(reads, i);
            let mut s = var.state.lock();
            if is_mine(&s.last_write) {
                disjoint = false;
                continue;
            }
            if s.reads_since_write.ends_with(&completion) {
                continue;
            }
            if let Some(w) = &s.last_write {
                if !w.is_done() {
                    deps.push(Arc::clone(w));
                }
            }
            s.reads_since_write.prune();
            s.reads_since_write.add(&completion);
        }
        (completion, deps, disjoint)
    }

    /// Schedules `work`, which reads `reads` and writes `writes`, and returns at once. Among
    /// ready ops, higher `priority` runs first.
    pub fn push(&self, reads: &[&Var], writes: &[&Var], priority: i32, work: Work) {
        self.push_batch(reads, writes, priority, false, move |_| work());
    }

    /// [`Engine::push`] for an op over many arrays. `work` is told whether the op's variables
    /// are disjoint (none written twice, none both read and written), which registration finds
    /// out anyway: if so, it may lock all of their memory at once.
    ///
    /// With `tiny` (work of a few microseconds), an op with nothing pending on its variables
    /// runs at once on the calling thread, which costs less than waking a worker (tens of
    /// microseconds on a VM). Nothing observable changes: the op was ready, and ready ops on
    /// distinct variables run in no guaranteed order.
    pub fn push_batch(&self, reads: &[&Var], writes: &[&Var], priority: i32, tiny: bool, work: impl FnOnce(bool) + Send + 'static) {
        *self.outstanding.lock() += 1;
        let (completion, deps, disjoint) = self.register(reads, writes);
        let op = Arc::new(Op {
            remaining: AtomicUsize::new(1),
            work: Mutex::new(Some(Box::new(move || work(disjoint)))),
            priority,
            completion,
        });
        for dep in deps {
            op.remaining.fetch_add(1, Ordering::AcqRel);
            if !dep.add_waiter(&op) {
                op.remaining.fetch_sub(1, Ordering::AcqRel);
            }
        }
        // One count left means every dependency has finished: only this registration holds
        // the op back, and nothing else can release it.
        if tiny && op.remaining.load(Ordering::Acquire) == 1 {
            op.remaining.store(0, Ordering::Release);
            self.run(op);
        } else {
            self.release(op);
        }
    }

    /// Drops one dependency of `op`; the last one makes it ready.
    fn release(&self, op: Arc<Op>) {
        if op.remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
            if self.workers.load(Ordering::Relaxed) == 0 {
                self.run(op);
            } else {
                self.ready.push(op);
            }
        }
    }

    /// Runs `work` on the calling thread, ordered with scheduled ops as if it were one: it
    /// waits for the ops it depends on, and later ops wait for it.
    pub fn run_sync<R>(&self, reads: &[&Var], writes: &[&Var], work: impl FnOnce() -> R) -> R {
        let (completion, deps, _) = self.register(reads, writes);
        for dep in deps {
            dep.wait();
        }
        // Complete even if `work` panics, or every later op on these vars would hang.
        struct CompleteOnDrop<'a>(&'a Engine, Arc<Completion>);
        impl Drop for CompleteOnDrop<'_> {
            fn drop(&mut self) {
                for waiter in self.1.complete() {
                    self.0.release(waiter);
                }
            }
        }
        let _complete = CompleteOnDrop(self, completion);
        work()
    }

    /// Blocks until every op writing `var` has finished.
    pub fn wait_to_read(&self, var: &Var) {
        self.run_sync(&[var], &[], || ());
    }

    /// Blocks until every op reading or writing `var` has finished.
    pub fn wait_to_write(&self, var: &Var) {
        self.run_sync(&[], &[var], || ());
    }

    /// Blocks until every scheduled op has finished.
    pub fn wait_all(&self) {
        let mut n = self.outstanding.lock();
        while *n > 0 {
            self.all_done.wait(&mut n);
        }
    }

    /// How many more threads an op could use without taking a core from other ready or
    /// running ops: the workers that are idle and have nothing queued for them. A big op
    /// split over threads while the other workers are busy only oversubscribes the cores
    /// (resnet50 on 2 cores: ~20% slower than one thread per op).
    pub fn spare_threads(&self) -> usize {
        let workers = self.workers.load(Ordering::Relaxed);
        let busy = self.running.load(Ordering::Relaxed) + self.ready.len();
        workers.saturating_sub(busy)
    }

    fn work_loop(&self) {
        loop {
            let op = self.ready.pop();
            self.run(op);
        }
    }

    /// Runs a ready op, then releases the ops waiting for it.
    fn run(&self, op: Arc<Op>) {
        let work = op.work.lock().take();
        if let Some(work) = work {
            self.running.fetch_add(1, Ordering::Relaxed);
            // A panic in one op must not kill the worker; ops validate their inputs before
            // they are scheduled, so this is a last resort.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(work));
            self.running.fetch_sub(1, Ordering::Relaxed);
        }
        for waiter in op.completion.complete() {
            self.release(waiter);
        }
        let mut n = self.outstanding.lock();
        *n -= 1;
        if *n == 0 {
            self.all_done.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    #[test]
    fn ops_on_one_var_run_in_call_order() {
        let var = Var::new();
        let log = Arc::new(Mutex::new(Vec::new()));
        for i in 0..200 {
            let log = Arc::clone(&log);
            // Alternate priorities: priority must not reorder dependent ops.
            engine().push(&[], &[&var], if i % 2 == 0 { 10 } else { -10 }, Box::new(move || log.lock().push(i)));
        }
        engine().wait_to_read(&var);
        assert_eq!(*log.lock(), (0..200).collect::<Vec<_>>());
    }

    #[test]
    fn reads_wait_for_writes_and_writes_wait_for_reads() {
        let a = Var::new();
        let value = Arc::new(AtomicU64::new(0));
        let seen = Arc::new(Mutex::new(Vec::new()));
        for round in 1..=50u64 {
            let v = Arc::clone(&value);
            engine().push(&[], &[&a], 0, Box::new(move || {
                std::thread::yield_now();
                v.store(round, Ordering::SeqCst)
            }));
            for _ in 0..3 {
                let (v, s) = (Arc::clone(&value), Arc::clone(&seen));
                engine().push(&[&a], &[], 0, Box::new(move || s.lock().push((round, v.load(Ordering::SeqCst)))));
            }
        }
        engine().wait_to_write(&a);
        let seen = seen.lock();
        assert_eq!(seen.len(), 150);
        assert!(seen.iter().all(|(round, v)| round == v), "{seen:?}");
    }

    #[test]
    fn run_sync_is_ordered_with_scheduled_ops() {
        let var = Var::new();
        let value = Arc::new(AtomicU64::new(0));
        let v = Arc::clone(&value);
        engine().push(&[], &[&var], 0, Box::new(move || {
            std::thread::sleep(std::time::Duration::from_millis(20));
            v.store(7, Ordering::SeqCst)
        }));
        let read = engine().run_sync(&[&var], &[], || value.load(Ordering::SeqCst));
        assert_eq!(read, 7);
    }

    #[test]
    fn tiny_ops_run_at_once_when_ready_and_in_order_otherwise() {
        let var = Var::new();
        let log = Arc::new(Mutex::new(Vec::new()));
        let l = Arc::clone(&log);
        engine().push_batch(&[], &[&var], 0, true, move |_| l.lock().push(1));
        assert_eq!(*log.lock(), vec![1], "a ready tiny op has run when push_batch returns");
        let (l, gate) = (Arc::clone(&log), Arc::new(std::sync::Barrier::new(2)));
        let g = Arc::clone(&gate);
        engine().push(&[], &[&var], 0, Box::new(move || {
            g.wait();
            l.lock().push(2)
        }));
        let l = Arc::clone(&log);
        engine().push_batch(&[&var], &[], 0, true, move |_| l.lock().push(3));
        assert_eq!(*log.lock(), vec![1], "a tiny op waits for the pending write");
        gate.wait();
        engine().wait_to_write(&var);
        assert_eq!(*log.lock(), vec![1, 2, 3]);
    }

    #[test]
    fn batches_learn_whether_their_variables_are_disjoint() {
        let (a, b, c) = (Var::new(), Var::new(), Var::new());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let cases: [(&[&Var], &[&Var], bool); 4] = [
            (&[&a, &a, &b], &[&c], true),
            (&[&a], &[&b, &c, &b], false),
            (&[&a, &c], &[&b, &c], false),
            (&[], &[], true),
        ];
        for (reads, writes, _) in cases {
            let s = Arc::clone(&seen);
            engine().push_batch(reads, writes, 0, false, move |disjoint| s.lock().push(disjoint));
            engine().wait_all();
        }
        assert_eq!(*seen.lock(), cases.iter().map(|c| c.2).collect::<Vec<_>>());
    }

    #[test]
    fn vars_listed_twice_are_ordered_like_vars_listed_once() {
        let (a, b) = (Var::new(), Var::new());
        let value = Arc::new(AtomicU64::new(0));
        let seen = Arc::new(Mutex::new(Vec::new()));
        for round in 1..=30u64 {
            let v = Arc::clone(&value);
            engine().push(&[&b, &b], &[&a, &a], 0, Box::new(move || {
                std::thread::yield_now();
                v.store(round, Ordering::SeqCst)
            }));
            let (v, s) = (Arc::clone(&value), Arc::clone(&seen));
            engine().push(&[&a, &b, &a], &[], 0, Box::new(move || {
                std::thread::yield_now();
                s.lock().push((round, v.load(Ordering::SeqCst)))
            }));
        }
        engine().wait_to_write(&a);
        let seen = seen.lock();
        assert_eq!(seen.len(), 30);
        assert!(seen.iter().all(|(round, v)| round == v), "{seen:?}");
    }

    #[test]
    fn an_op_reading_and_writing_one_var_does_not_wait_for_itself() {
        let var = Var::new();
        let done = Arc::new(AtomicU64::new(0));
        let d = Arc::clone(&done);
        engine().push(&[&var, &var], &[&var, &var], 0, Box::new(move || { d.fetch_add(1, Ordering::SeqCst); }));
        engine().wait_to_write(&var);
        assert_eq!(done.load(Ordering::SeqCst), 1);
    }
}
