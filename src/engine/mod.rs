//! The dependency engine: operations declare the variables (storage chunks) they read and
//! write; an operation runs on a worker thread once every earlier operation that writes what it
//! touches, or reads what it writes, has finished. This is MXNet's engine contract: calls return
//! after scheduling, work on one array runs in call order, and reads wait for pending writes.
//!
//! An op may fail (return an error, or panic) after the call that scheduled it has returned;
//! the failure is kept on the variables it writes and reported at the next wait (see
//! [`poison`]). An op may also finish later, on another thread or a device: it is handed an
//! [`OpDone`] and completes when that is finished (see [`Engine::push_async`]).
//!
//! In hosted mode a host's engine orders and runs the ops instead of the workers (see
//! [`scheduler`]); the engine's completions, waits and failure reports stay the same.

mod completion;
mod extend;
mod host_extend;
mod marks;
mod placement;
mod poison;
mod queue;
mod scheduler;
mod vars;

use crate::base::affinity;
use crate::error::{Error, Result};
use completion::Completion;
use once_cell::sync::Lazy;
use parking_lot::{Condvar, Mutex};
use poison::{Failure, Poison};
use queue::ReadyQueue;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

pub use extend::Ticket;
pub use host_extend::{Deferred, Detach};
pub use scheduler::{HostCompletion, HostStart, Scheduler};
pub use vars::{OwnedVar, Var};

/// What an op is told when it runs.
#[derive(Debug, Clone, Copy)]
pub struct OpEnv {
    disjoint: bool,
    threads: usize,
}

impl OpEnv {
    /// Whether the op's variables are disjoint (none written twice, none both read and
    /// written), which registration finds out anyway: if so, the op may lock all of their
    /// memory at once.
    pub fn disjoint(&self) -> bool {
        self.disjoint
    }

    /// Threads the op may use: its own and those of the idle workers with nothing queued. A
    /// big op split over threads while the other workers are busy only oversubscribes the
    /// cores.
    pub fn threads(&self) -> usize {
        self.threads
    }
}

/// The completion of an op started by [`Engine::push_async`]: the op finishes when this is
/// finished, from any thread. Dropped unfinished (the work panicked, or lost it), the op
/// fails with a message saying so, so that nothing waits for it forever.
pub struct OpDone {
    engine: &'static Engine,
    op: Option<Arc<Op>>,
}

impl OpDone {
    /// Completes the op; an error is kept on the variables it writes (see [`poison`]).
    pub fn finish(mut self, result: Result<()>) {
        if let Some(op) = self.op.take() {
            self.engine.finish(op, result.err().map(Failure::new));
        }
    }

    /// A handle that tells the engine when the op's device work is all enqueued
    /// ([`StreamSignal::enqueued`]), taken before `self` goes to whatever finishes it.
    pub fn stream_signal(&self) -> StreamSignal {
        StreamSignal { engine: self.engine, op: self.op.clone() }
    }
}

/// Tells the engine that a device op's work is all enqueued on one stream ([`DeviceOp::stream`]).
pub struct StreamSignal {
    engine: &'static Engine,
    op: Option<Arc<Op>>,
}

impl StreamSignal {
    /// The op's work is all enqueued on `stream`, and so is whatever tells of its completion
    /// (the device completes ops in the order of their work): ops waiting for it whose work goes
    /// to the same stream are released now, their work queued behind its.
    pub fn enqueued(self, stream: u64) {
        let Some(op) = self.op else { return };
        for waiter in op.completion.enqueued(stream) {
            waiter.stream_ordered.store(true, Ordering::Release);
            self.engine.release_after_device_op(waiter);
        }
    }
}

impl Drop for OpDone {
    fn drop(&mut self) {
        if let Some(op) = self.op.take() {
            let why = if std::thread::panicking() { "panicked" } else { "ended without completing" };
            self.engine.finish(op, Some(Failure::new(Error::new(format!("an asynchronous engine operation {why}")))));
        }
    }
}

type Work = Box<dyn FnOnce(&OpEnv, OpDone) + Send + 'static>;

/// An operation waiting for its dependencies, then for a worker.
pub(crate) struct Op {
    /// Dependencies not yet finished, plus one while the op is being registered.
    remaining: AtomicUsize,
    work: Mutex<Option<Work>>,
    priority: i32,
    completion: Arc<Completion>,
    /// How variables' slots name it (see [`marks`]).
    mark: marks::MarkRef,
    disjoint: bool,
    /// Ids of the variables written, then of those read: where a failure goes, and where an
    /// inherited one comes from.
    vars: Vec<u64>,
    writes: usize,
    /// Ids of the variables added to its writes before it started (see [`Engine::try_extend`]).
    extra_writes: Mutex<Vec<u64>>,
    /// Where the op runs in the host's engine: completes the host's op.
    host_completion: Mutex<Option<HostCompletion>>,
    /// Where the op runs in the host's engine and may be extended: the tokens it writes there.
    write_tokens: Mutex<Vec<usize>>,
    /// Its extensions in the host's engine (see [`host_extend`]).
    host_extensions: Mutex<Vec<Arc<host_extend::HostExtension>>>,
    /// Whether the host's engine has started it (taken under its `work` lock).
    host_started: std::sync::atomic::AtomicBool,
    /// Its work only enqueues device work ([`Engine::push_device`]).
    device: bool,
    /// The device stream all of its work goes to, when known before it runs
    /// ([`DeviceOp::stream`]).
    stream: Option<u64>,
    /// It was released before an op it depends on finished, that op's work being ahead of
    /// its own on their stream: a failure of that op reaches it when it finishes.
    stream_ordered: std::sync::atomic::AtomicBool,
}

/// How a device op is scheduled ([`Engine::push_device`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct DeviceOp {
    /// Over a few arrays: ready at once and alone in the engine, it runs on the calling
    /// thread, as [`Engine::push_batch`]'s tiny ops (enqueueing its device work costs less than
    /// waking a worker).
    pub tiny: bool,
    /// Returns the op's ticket for [`Engine::try_extend`].
    pub extensible: bool,
    /// The one device stream (a key of the backend's choosing) that all of the op's work goes
    /// to, in order, when known at scheduling: the op then need not wait for ops on the same
    /// stream whose work is enqueued ([`StreamSignal::enqueued`]), as the stream runs its
    /// work after theirs.
    pub stream: Option<u64>,
}

/// The engine: a scheduling lock, a ready queue and worker threads.
pub struct Engine {
    // Dependency capture and registration must be atomic across all of an op's variables, or
    // two ops scheduled at once on crossed variables could wait for each other.
    schedule_lock: Mutex<()>,
    ready: ReadyQueue,
    /// Ops scheduled and not finished, and how many of them are device ops.
    outstanding: AtomicUsize,
    device_outstanding: AtomicUsize,
    /// Where `wait_all` sleeps until `outstanding` reaches zero.
    idle: Mutex<()>,
    all_done: Condvar,
    /// Worker threads running; with none (spawning failed), ready ops run on the thread that
    /// made them ready.
    workers: AtomicUsize,
    /// Ops executing right now.
    running: AtomicUsize,
    poison: Poison,
    /// A host engine of this engine's own (tests); the process's engine uses [`run_ops_on`]'s.
    host: Option<&'static dyn Scheduler>,
}

static ENGINE: Lazy<&'static Engine> = Lazy::new(Engine::start);

/// The host engine that runs every op, in hosted mode (see [`scheduler`]).
static SCHEDULER: once_cell::sync::OnceCell<&'static dyn Scheduler> = once_cell::sync::OnceCell::new();

/// Makes `host` run every op from now on (hosted mode, set once as the host loads, before
/// any op exists). `false` if a scheduler was set already.
pub fn run_ops_on(host: &'static dyn Scheduler) -> bool {
    SCHEDULER.set(host).is_ok()
}

fn worker_count() -> usize {
    let cores = affinity::process_parallelism();
    std::env::var("MXNET_CPU_WORKER_NTHREADS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|&n| n > 0)
        .unwrap_or(cores.max(2))
}

/// A device op over at most this many arrays, released by a device op's completion while that
/// thread runs another, runs there after it (a few microseconds of enqueueing) rather than
/// wait for a worker's wake-up; a bigger one is enqueued by a worker meanwhile.
const LIGHT_DEVICE_OP_ARRAYS: usize = 256;

/// The process-wide engine.
pub fn engine() -> &'static Engine {
    *ENGINE
}

/// Asks for the variable a few places after `i`: each is on its own cache line, usually not
/// in this core's cache (the data a call moves evicts them), which registration then writes.
#[inline(always)]
fn prefetch_ahead(vars: &[Var], i: usize) {
    const AHEAD: usize = 8;
    if let Some(v) = vars.get(i + AHEAD) {
        crate::base::prefetch::prefetch_line_for_write(v.slot());
    }
}

/// The message of a caught panic.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    let text = payload.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| payload.downcast_ref::<String>().cloned());
    format!("an engine operation panicked: {}", text.unwrap_or_else(|| "unknown panic payload".to_string()))
}

/// The outcome of running `work`, a panic turned into an error.
fn catch<R>(work: impl FnOnce() -> Result<R>) -> Result<R> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(work)).unwrap_or_else(|p| Err(Error::new(panic_message(&*p))))
}

struct Registered {
    completion: Arc<Completion>,
    /// The op's mark (see [`marks`]), given back as it completes.
    mark: marks::MarkRef,
    deps: vars::Deps,
    disjoint: bool,
    /// Ids of the writes, then of the reads.
    vars: Vec<u64>,
}

impl Engine {
    /// A new engine with its workers (`MXNET_CPU_WORKER_NTHREADS`, else one per core, at
    /// least two). The process has one ([`engine`]); tests start their own to keep failures
    /// apart.
    fn start() -> &'static Engine {
        Engine::start_with(None)
    }

    /// A new engine whose ops `host` runs (tests of the host seam).
    #[cfg(test)]
    fn start_on(host: &'static dyn Scheduler) -> &'static Engine {
        Engine::start_with(Some(host))
    }

    fn start_with(host: Option<&'static dyn Scheduler>) -> &'static Engine {
        let engine: &'static Engine = Box::leak(Box::new(Engine {
            schedule_lock: Mutex::new(()),
            ready: ReadyQueue::new(),
            outstanding: AtomicUsize::new(0),
            device_outstanding: AtomicUsize::new(0),
            idle: Mutex::new(()),
            all_done: Condvar::new(),
            workers: AtomicUsize::new(0),
            running: AtomicUsize::new(0),
            poison: Poison::default(),
            host,
        }));
        let workers = worker_count();
        let cpus = placement::worker_cpus(workers, affinity::process_cpus(), placement::setting(), placement::shared_host());
        for i in 0..workers {
            let cpu = cpus.as_ref().map(|c| c[i]);
            // A worker that cannot be spawned leaves fewer workers; with none at all, ops run
            // inline (see `Engine::release`).
            let spawned = std::thread::Builder::new().name(format!("kvstore-worker-{i}")).spawn(move || {
                // A refused pin leaves the worker where the system puts it.
                if let Some(cpu) = cpu {
                    affinity::pin_current_thread(cpu);
                }
                engine.work_loop()
            });
            if spawned.is_ok() {
                engine.workers.fetch_add(1, Ordering::Relaxed);
            }
        }
        engine
    }

    /// The host engine running the ops now, if any.
    fn host_scheduler(&self) -> Option<&'static dyn Scheduler> {
        self.host.or_else(|| SCHEDULER.get().copied()).filter(|s| s.active())
    }

    /// Registers an op reading `reads` and writing `writes` (either may list a variable more
    /// than once, or in both): its completion, the completions it must wait for, whether its
    /// variables are disjoint (none written twice, none both read and written), and their ids.
    fn register(&self, reads: &[Var], writes: &[Var], device: bool) -> Registered {
        let (op, completion) = marks::marked(device);
        let mut deps = Vec::new();
        let mut disjoint = true;
        let mut vars = Vec::with_capacity(reads.len() + writes.len());
        let _guard = self.schedule_lock.lock();
        // Writes first: a variable this op also reads, or lists twice, then shows this op as
        // its last writer, which the reads recognise.
        for (i, var) in writes.iter().enumerate() {
            prefetch_ahead(writes, i);
            let slot = var.slot();
            vars.push(slot.id());
            if slot.register_write(op, &mut deps) != vars::Registration::Added {
                disjoint = false;
            }
        }
        for (i, var) in reads.iter().enumerate() {
            prefetch_ahead(reads, i);
            let slot = var.slot();
            vars.push(slot.id());
            if slot.register_read(op, &mut deps) == vars::Registration::WrittenByIt {
                disjoint = false;
            }
        }
        Registered { completion, mark: op, deps, disjoint, vars }
    }

    /// Schedules `work`, which reads `reads` and writes `writes`, and returns at once. Among
    /// ready ops, higher `priority` runs first. An error (or a panic) of `work` is kept on
    /// `writes` and reported at the next wait on them (see [`poison`]).
    pub fn push(&'static self, reads: &[Var], writes: &[Var], priority: i32, work: impl FnOnce(&OpEnv) -> Result<()> + Send + 'static) {
        self.push_batch(reads, writes, priority, false, false, work);
    }

    /// [`Engine::push`] for an op over many arrays.
    ///
    /// With `tiny` (work of a few microseconds), an op with nothing pending on its variables
    /// runs at once on the calling thread, which costs less than waking a worker (tens of
    /// microseconds on a VM). Nothing observable changes: the op was ready, and ready ops on
    /// distinct variables run in no guaranteed order. With `extensible`, returns the op's
    /// ticket, for [`Engine::try_extend`].
    pub fn push_batch(
        &'static self,
        reads: &[Var],
        writes: &[Var],
        priority: i32,
        tiny: bool,
        extensible: bool,
        work: impl FnOnce(&OpEnv) -> Result<()> + Send + 'static,
    ) -> Option<Ticket> {
        self.schedule(reads, writes, priority, tiny, extensible, false, None, Box::new(move |env, done| done.finish(catch(|| work(env)))))
    }

    /// Schedules an op whose work may finish later, on another thread or a device: `work`
    /// starts it and hands on `done`, and the op completes (its writes become readable, the
    /// ops waiting for it are released) when `done` is finished. The variables stay claimed
    /// until then; the worker is free as soon as `work` returns.
    pub fn push_async(&'static self, reads: &[Var], writes: &[Var], priority: i32, work: impl FnOnce(&OpEnv, OpDone) + Send + 'static) {
        self.schedule(reads, writes, priority, false, false, false, None, Box::new(work));
    }

    /// [`Engine::push_async`] for an op whose work only enqueues device work (and completes
    /// from the device's completion thread): when another such op's completion releases it,
    /// it runs right there, on that thread, instead of waking a worker (tens of microseconds
    /// on a VM, per op of a chain). See [`DeviceOp`] for the rest.
    pub fn push_device(
        &'static self,
        reads: &[Var],
        writes: &[Var],
        priority: i32,
        how: DeviceOp,
        work: impl FnOnce(&OpEnv, OpDone) + Send + 'static,
    ) -> Option<Ticket> {
        self.schedule(reads, writes, priority, how.tiny, how.extensible, true, how.stream, Box::new(work))
    }

    /// How many ops have been registered on `var` so far (each op reading or writing it, and
    /// every wait on it, counts once): unchanged between two calls means no op was registered
    /// on it in between, so the op registered just before the first is still its latest.
    /// In native mode only: where a host's engine runs the ops (or ran them, before the host
    /// shut down), the host's own ops on the memory are not counted, and `None` says so.
    pub fn ops_on(&self, var: Var) -> Option<u64> {
        let hosted = self.host.is_some() || SCHEDULER.get().is_some();
        (!hosted).then(|| var.slot().ops())
    }

    /// Whether a host's engine (hosted mode) runs the ops now.
    pub fn hosted(&self) -> bool {
        self.host_scheduler().is_some()
    }

    /// Schedules an op; with `ticketed`, returns its ticket (the op's weak reference costs two
    /// atomic operations, which latency-bound calls do not pay).
    #[allow(clippy::too_many_arguments)]
    fn schedule(
        &'static self,
        reads: &[Var],
        writes: &[Var],
        priority: i32,
        tiny: bool,
        ticketed: bool,
        device: bool,
        stream: Option<u64>,
        work: Work,
    ) -> Option<Ticket> {
        self.outstanding.fetch_add(1, Ordering::AcqRel);
        if device {
            self.device_outstanding.fetch_add(1, Ordering::AcqRel);
        }
        let Registered { completion, mark, deps, disjoint, vars } = self.register(reads, writes, device);
        let op = Arc::new(Op {
            remaining: AtomicUsize::new(1),
            work: Mutex::new(Some(work)),
            priority,
            completion,
            mark,
            disjoint,
            vars,
            writes: writes.len(),
            extra_writes: Mutex::new(Vec::new()),
            host_completion: Mutex::new(None),
            write_tokens: Mutex::new(Vec::new()),
            host_extensions: Mutex::new(Vec::new()),
            host_started: std::sync::atomic::AtomicBool::new(false),
            device,
            stream,
            stream_ordered: std::sync::atomic::AtomicBool::new(false),
        });
        let ticket = ticketed.then(|| Ticket::of(&op));
        if let Some(host) = self.host_scheduler() {
            // The host orders it; its completion still ends the native waits on its variables.
            drop(deps);
            self.schedule_on_host(host, reads, writes, op, ticketed);
            return ticket;
        }
        for (_, dep) in deps {
            op.remaining.fetch_add(1, Ordering::AcqRel);
            match dep.add_waiter(&op) {
                completion::Wait::Added => {}
                completion::Wait::Finished => {
                    op.remaining.fetch_sub(1, Ordering::AcqRel);
                }
                completion::Wait::StreamOrdered => {
                    op.stream_ordered.store(true, Ordering::Release);
                    op.remaining.fetch_sub(1, Ordering::AcqRel);
                }
            }
        }
        // One count left means every dependency has finished (or is ahead of it on its
        // stream): only this registration holds the op back, and nothing else can release it.
        // A device op runs here only when it is the engine's one op, or queued behind the op
        // it waited for on its stream: among others (a call of many keys), the workers
        // enqueue them while this thread goes on registering.
        let alone = !device || self.outstanding.load(Ordering::Acquire) == 1 || op.stream_ordered.load(Ordering::Acquire);
        if tiny && alone && op.remaining.load(Ordering::Acquire) == 1 {
            op.remaining.store(0, Ordering::Release);
            self.run(op);
        } else {
            self.release(op);
        }
        ticket
    }

    /// Queues `op` in the host's engine on its variables' tokens.
    /// With `extensible` (it has a ticket), the op keeps its write tokens (`host_extend`).
    fn schedule_on_host(&'static self, host: &'static dyn Scheduler, reads: &[Var], writes: &[Var], op: Arc<Op>, extensible: bool) {
        let tokens = |vars: &[Var]| vars.iter().map(|v| v.token(host)).collect::<Result<Vec<usize>>>();
        let start = OnHost { engine: self, op: Some(Arc::clone(&op)) };
        let pushed = tokens(reads).and_then(|r| {
            let (r, w) = scheduler::distinct(&r, &tokens(writes)?);
            if extensible {
                op.write_tokens.lock().clone_from(&w);
            }
            host.push(&r, &w, op.priority, Box::new(move |complete, refusal| start.run(complete, refusal)))
        });
        if let Err(e) = pushed {
            self.skip(op, Failure::new(e));
        }
    }

    /// Fails `op` without running it, unless it has run.
    fn skip(&'static self, op: Arc<Op>, failure: Arc<Failure>) {
        let work = op.work.lock().take();
        if work.is_some() {
            drop(work);
            self.finish(op, Some(failure));
        }
    }

    /// Drops one dependency of `op`; the last one makes it ready.
    fn release(&'static self, op: Arc<Op>) {
        if op.remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
            if self.workers.load(Ordering::Relaxed) == 0 {
                self.run(op);
            } else {
                self.ready.push(op);
            }
        }
    }

    /// [`Engine::release`] from a device op's completion (a device's completion thread, or the
    /// worker whose device op enqueued nothing), for a device op: a ready one runs here, once
    /// per thread at a time (not nested: one released meanwhile runs after it, if light), so a
    /// chain of device ops never waits for a worker.
    fn release_after_device_op(&'static self, op: Arc<Op>) {
        thread_local! {
            static RUNNING_RELEASED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
            static LIGHT_RELEASED: std::cell::RefCell<std::collections::VecDeque<Arc<Op>>> =
                const { std::cell::RefCell::new(std::collections::VecDeque::new()) };
        }
        if op.remaining.fetch_sub(1, Ordering::AcqRel) != 1 {
            return;
        }
        if self.workers.load(Ordering::Relaxed) == 0 {
            return self.run(op);
        }
        if RUNNING_RELEASED.with(|r| r.replace(true)) {
            // Released while this thread runs another: a light op runs here next, in turn; a
            // heavy one goes to a worker, in parallel with this thread's.
            if op.vars.len() <= LIGHT_DEVICE_OP_ARRAYS {
                LIGHT_RELEASED.with(|q| q.borrow_mut().push_back(op));
            } else {
                self.ready.push(op);
            }
            return;
        }
        self.run(op);
        while let Some(next) = LIGHT_RELEASED.with(|q| q.borrow_mut().pop_front()) {
            self.run(next);
        }
        RUNNING_RELEASED.with(|r| r.set(false));
    }

    /// Runs `work` on the calling thread, ordered with scheduled ops as if it were one: it
    /// waits for the ops it depends on, and later ops wait for it. This is a wait: a failure
    /// kept on any of the variables is reported (and cleared) instead of running `work`, as
    /// MXNet's `WaitToRead`/`WaitToWrite` do before a synchronous copy.
    pub fn run_sync<R>(&'static self, reads: &[Var], writes: &[Var], work: impl FnOnce() -> R) -> Result<R> {
        let Registered { completion, mark, deps, vars, .. } = self.register(reads, writes, false);
        for (_, dep) in deps {
            dep.wait();
        }
        // In hosted mode the host's own ops on the tokens (a turn's) count too. The store's
        // arrays are touched only by its calls, which it serialises, and its ops, so nothing
        // is queued on them meanwhile.
        let host_wait = match self.host_scheduler() {
            Some(host) => {
                let each = |vs: &[Var], write: bool| vs.iter().filter_map(|v| v.existing_token()).try_for_each(|t| host.wait(t, write));
                each(reads, false).and_then(|()| each(writes, true))
            }
            None => Ok(()),
        };
        // Complete even if `work` panics, or every later op on these vars would hang.
        struct CompleteOnDrop(&'static Engine, Arc<Completion>, marks::MarkRef);
        impl Drop for CompleteOnDrop {
            fn drop(&mut self) {
                let mark = self.2;
                let waiters = self.1.complete(|| marks::give_back(mark));
                for waiter in waiters {
                    self.0.release(waiter);
                }
            }
        }
        let _complete = CompleteOnDrop(self, completion, mark);
        if let Some(error) = self.poison.take(&vars) {
            return Err(error);
        }
        host_wait?;
        Ok(work())
    }

    /// Blocks until every op writing `var` has finished; reports (and clears) a failure kept
    /// on it.
    pub fn wait_to_read(&'static self, var: Var) -> Result<()> {
        self.run_sync(&[var], &[], || ())
    }

    /// Blocks until every op reading or writing `var` has finished; reports (and clears) a
    /// failure kept on it.
    pub fn wait_to_write(&'static self, var: Var) -> Result<()> {
        self.run_sync(&[], &[var], || ())
    }

    /// `var`'s token where a host engine runs the ops (hosted mode): a host op on it is ordered
    /// with the engine's ops on `var`.
    pub fn host_token(&self, var: Var) -> Result<Option<usize>> {
        self.host_scheduler().map(|host| var.token(host)).transpose()
    }

    /// Makes `token` (the caller's, now the variable's: released with it) `var`'s token where a
    /// host engine runs the ops: for memory the host also uses through an array sharing the
    /// token's dependency, so the host orders its own ops on it with the engine's directly.
    /// `false` (and nothing taken) where `var` has a token already or no host engine runs ops.
    pub fn bind_host_token(&self, var: Var, token: usize) -> bool {
        self.hosted() && var.bind_token(token)
    }

    /// Releases `var`'s token now, so that what it holds (a host array over `var`'s own memory,
    /// see [`Engine::bind_host_token`]) can go before `var` does. Ops already queued keep what
    /// they need; a later op gets a new token.
    pub fn release_host_token(&self, var: Var) {
        let token = var.take_token();
        if let (true, Some(host)) = (token != 0, self.host.or_else(|| SCHEDULER.get().copied())) {
            host.release_token(token);
        }
    }

    /// Blocks until every scheduled op has finished; reports the first failure since the
    /// last `wait_all` and clears them all.
    pub fn wait_all(&self) -> Result<()> {
        // While only device ops are pending, their completion threads finish them without a
        // CPU of ours: a short spin saves the wake-up of a sleep (tens of microseconds on a
        // VM), about the time a small op takes on the GPU.
        let device_only = || {
            let n = self.outstanding.load(Ordering::Acquire);
            n > 0 && n == self.device_outstanding.load(Ordering::Acquire)
        };
        if device_only() {
            completion::spin_until(|| !device_only());
        }
        while self.outstanding.load(Ordering::Acquire) > 0 {
            let mut idle = self.idle.lock();
            // Checked under the lock that `finish` takes to notify: no wake-up is lost.
            if self.outstanding.load(Ordering::Acquire) == 0 {
                break;
            }
            self.all_done.wait(&mut idle);
        }
        self.poison.take_all().map_or(Ok(()), Err)
    }

    /// Threads a synchronous caller (not an op) may use: its own and the idle workers'.
    pub fn thread_budget(&self) -> usize {
        1 + self.spare_threads()
    }

    /// The workers that are idle and have nothing queued for them.
    fn spare_threads(&self) -> usize {
        let workers = self.workers.load(Ordering::Relaxed);
        let busy = self.running.load(Ordering::Relaxed) + self.ready.len();
        workers.saturating_sub(busy)
    }

    fn work_loop(&'static self) {
        loop {
            let op = self.ready.pop();
            self.run(op);
        }
    }

    /// Runs a ready op: its work, or, when a variable it touches holds a failure, nothing
    /// (the op fails with that failure, which so reaches its outputs).
    fn run(&'static self, op: Arc<Op>) {
        let work = op.work.lock().take();
        let Some(work) = work else { return };
        if let Some(inherited) = self.poison.find(&op.vars) {
            drop(work);
            self.finish(op, Some(inherited));
            return;
        }
        self.running.fetch_add(1, Ordering::Relaxed);
        let env = OpEnv { disjoint: op.disjoint, threads: 1 + self.spare_threads() };
        // A panic inside `work` drops `done`, which fails the op; the worker lives on.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| work(&env, OpDone { engine: self, op: Some(op) })));
        self.running.fetch_sub(1, Ordering::Relaxed);
    }

    /// Completes an op: records its failure on what it writes, then releases the ops waiting
    /// for it.
    fn finish(&'static self, op: Arc<Op>, failure: Option<Arc<Failure>>) {
        // Released ahead of a stream-ordered dependency, the op ran on what that dependency
        // wrote, failed or not: its failure, kept by now on what this op touches (the device's
        // completions run in stream order), is this op's too.
        let failure = match failure {
            None if op.stream_ordered.load(Ordering::Acquire) => self.poison.find(&op.vars),
            f => f,
        };
        if let Some(f) = &failure {
            self.poison.record(&op.vars[..op.writes], f);
            self.poison.record(&op.extra_writes.lock(), f);
        }
        let host_completion = op.host_completion.lock().take();
        if let Some(complete) = host_completion {
            complete(failure.as_ref().and_then(|f| f.message()));
        }
        let extensions = std::mem::take(&mut *op.host_extensions.lock());
        for ext in extensions {
            ext.op_finished(self, failure.as_ref().and_then(|f| f.message()));
        }
        let waiters = op.completion.complete(|| marks::give_back(op.mark));
        for waiter in waiters {
            if op.device && waiter.device {
                self.release_after_device_op(waiter);
            } else {
                self.release(waiter);
            }
        }
        if op.device {
            self.device_outstanding.fetch_sub(1, Ordering::AcqRel);
        }
        if self.outstanding.fetch_sub(1, Ordering::AcqRel) == 1 {
            let _idle = self.idle.lock();
            self.all_done.notify_all();
        }
    }
}

/// An op queued in the host's engine: run when the host starts it; dropped unstarted (the host
/// skipped it after a failure on its tokens, or refused it), it fails with the failure kept on
/// its variables.
struct OnHost {
    engine: &'static Engine,
    op: Option<Arc<Op>>,
}

impl OnHost {
    fn run(mut self, complete: HostCompletion, refusal: Option<String>) {
        if let Some(op) = self.op.take() {
            *op.host_completion.lock() = Some(complete);
            {
                // Under the work's lock: no extension is added from now on (`try_extend`).
                let _work = op.work.lock();
                op.host_started.store(true, Ordering::Release);
                if refusal.is_none() {
                    op.host_extensions.lock().iter().for_each(|ext| ext.op_starts());
                }
            }
            match refusal {
                None => self.engine.run(op),
                Some(why) => self.engine.skip(op, Failure::new(Error::new(why))),
            }
        }
    }
}

impl Drop for OnHost {
    fn drop(&mut self) {
        if let Some(op) = self.op.take() {
            let failure = self.engine.poison.find(&op.vars).unwrap_or_else(|| {
                Failure::new(Error::new("the host's engine skipped libkvstore's op after a failure on its arrays"))
            });
            self.engine.skip(op, failure);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicU64};

    #[test]
    fn ops_on_one_var_run_in_call_order() {
        let var = Var::new();
        let log = Arc::new(Mutex::new(Vec::new()));
        for i in 0..200 {
            let log = Arc::clone(&log);
            // Alternate priorities: priority must not reorder dependent ops.
            engine().push(&[], &[var], if i % 2 == 0 { 10 } else { -10 }, move |_| { log.lock().push(i); Ok(()) });
        }
        engine().wait_to_read(var).unwrap();
        assert_eq!(*log.lock(), (0..200).collect::<Vec<_>>());
    }

    #[test]
    fn reads_wait_for_writes_and_writes_wait_for_reads() {
        let a = Var::new();
        let value = Arc::new(AtomicU64::new(0));
        let seen = Arc::new(Mutex::new(Vec::new()));
        for round in 1..=50u64 {
            let v = Arc::clone(&value);
            engine().push(&[], &[a], 0, move |_| {
                std::thread::yield_now();
                v.store(round, Ordering::SeqCst);
                Ok(())
            });
            for _ in 0..3 {
                let (v, s) = (Arc::clone(&value), Arc::clone(&seen));
                engine().push(&[a], &[], 0, move |_| { s.lock().push((round, v.load(Ordering::SeqCst))); Ok(()) });
            }
        }
        engine().wait_to_write(a).unwrap();
        let seen = seen.lock();
        assert_eq!(seen.len(), 150);
        assert!(seen.iter().all(|(round, v)| round == v), "{seen:?}");
    }

    #[test]
    fn ops_on_a_variable_count_every_op_registered_on_it_and_nothing_else() {
        let (var, other) = (Var::new(), Var::new());
        let count = || engine().ops_on(var).expect("native mode counts");
        assert_eq!(count(), 0);
        let (release, gate) = std::sync::mpsc::channel::<()>();
        engine().push(&[], &[var], 0, move |_| {
            let _ = gate.recv();
            Ok(())
        });
        let after_write = count();
        assert_eq!(after_write, 1);
        // Ops on other variables, and time passing, leave it unchanged: the write is still
        // the latest op on it, finished or not.
        engine().push(&[other], &[other], 0, |_| Ok(()));
        engine().wait_to_write(other).unwrap();
        assert_eq!(count(), after_write);
        release.send(()).unwrap();
        engine().push(&[var, var], &[], 0, |_| Ok(()));
        assert_eq!(count(), 2, "a read counts once however often the op lists it");
        engine().wait_to_write(var).unwrap();
        assert_eq!(count(), 3, "a wait is ordered like an op, so it counts too");
        engine().push(&[var], &[var], 0, |_| Ok(()));
        assert_eq!(count(), 4, "an op reading and writing it counts once");
        engine().wait_to_write(var).unwrap();
    }

    #[test]
    fn an_op_reading_many_arrays_of_one_unfinished_writer_waits_for_it_once() {
        let vars: Vec<Var> = (0..300).map(|_| Var::new()).collect();
        let refs: Vec<Var> = vars.clone();
        let (release, gate) = std::sync::mpsc::channel::<()>();
        engine().push(&[], &refs, 0, move |_| {
            gate.recv().ok();
            Ok(())
        });
        let writer = vars[0].slot().last_writer().expect("the writer is registered");
        let (done, seen) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let d = Arc::clone(&done);
        engine().push(&refs, &[], 0, move |_| {
            d.store(1, Ordering::SeqCst);
            Ok(())
        });
        assert_eq!(writer.waiter_entries(), 1, "one waiter entry for 300 arrays of one writer");
        // A writer after both waits for each of them once, not for 300 reads and writes.
        let s = Arc::clone(&seen);
        let d = Arc::clone(&done);
        engine().push(&[], &refs, 0, move |_| {
            s.store(d.load(Ordering::SeqCst), Ordering::SeqCst);
            Ok(())
        });
        assert_eq!(writer.waiter_entries(), 2, "the reader and the second writer, once each");
        release.send(()).unwrap();
        for v in &vars {
            engine().wait_to_write(*v).unwrap();
        }
        assert_eq!(seen.load(Ordering::SeqCst), 1, "the last writer ran after the reader");
    }

    #[test]
    fn a_read_forgets_a_finished_writer_and_still_waits_for_an_unfinished_one() {
        let var = Var::new();
        engine().push(&[], &[var], 0, |_| Ok(()));
        engine().wait_to_read(var).unwrap();
        engine().wait_to_read(var).unwrap();
        assert!(!var.slot().names_a_writer(), "a read after the write finished drops it");
        let value = Arc::new(AtomicU64::new(0));
        let v = Arc::clone(&value);
        engine().push(&[], &[var], 0, move |_| {
            std::thread::sleep(std::time::Duration::from_millis(20));
            v.store(5, Ordering::SeqCst);
            Ok(())
        });
        let (v, seen) = (Arc::clone(&value), Arc::new(AtomicU64::new(0)));
        let s = Arc::clone(&seen);
        engine().push(&[var], &[], 0, move |_| {
            s.store(v.load(Ordering::SeqCst), Ordering::SeqCst);
            Ok(())
        });
        engine().wait_to_write(var).unwrap();
        assert_eq!(seen.load(Ordering::SeqCst), 5);
    }

    #[test]
    fn run_sync_is_ordered_with_scheduled_ops() {
        let var = Var::new();
        let value = Arc::new(AtomicU64::new(0));
        let v = Arc::clone(&value);
        engine().push(&[], &[var], 0, move |_| {
            std::thread::sleep(std::time::Duration::from_millis(20));
            v.store(7, Ordering::SeqCst);
            Ok(())
        });
        let read = engine().run_sync(&[var], &[], || value.load(Ordering::SeqCst)).unwrap();
        assert_eq!(read, 7);
    }

    #[test]
    fn tiny_ops_run_at_once_when_ready_and_in_order_otherwise() {
        let var = Var::new();
        let log = Arc::new(Mutex::new(Vec::new()));
        let l = Arc::clone(&log);
        engine().push_batch(&[], &[var], 0, true, false, move |_| { l.lock().push(1); Ok(()) });
        assert_eq!(*log.lock(), vec![1], "a ready tiny op has run when push_batch returns");
        let (l, gate) = (Arc::clone(&log), Arc::new(std::sync::Barrier::new(2)));
        let g = Arc::clone(&gate);
        engine().push(&[], &[var], 0, move |_| {
            g.wait();
            l.lock().push(2);
            Ok(())
        });
        let l = Arc::clone(&log);
        engine().push_batch(&[var], &[], 0, true, false, move |_| { l.lock().push(3); Ok(()) });
        assert_eq!(*log.lock(), vec![1], "a tiny op waits for the pending write");
        gate.wait();
        engine().wait_to_write(var).unwrap();
        assert_eq!(*log.lock(), vec![1, 2, 3]);
    }

    #[test]
    fn batches_learn_whether_their_variables_are_disjoint() {
        let (a, b, c) = (Var::new(), Var::new(), Var::new());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let cases: [(&[Var], &[Var], bool); 4] = [
            (&[a, a, b], &[c], true),
            (&[a], &[b, c, b], false),
            (&[a, c], &[b, c], false),
            (&[], &[], true),
        ];
        for (reads, writes, _) in cases {
            let s = Arc::clone(&seen);
            engine().push_batch(reads, writes, 0, false, false, move |env| { s.lock().push(env.disjoint()); Ok(()) });
            engine().wait_all().unwrap();
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
            engine().push(&[b, b], &[a, a], 0, move |_| {
                std::thread::yield_now();
                v.store(round, Ordering::SeqCst);
                Ok(())
            });
            let (v, s) = (Arc::clone(&value), Arc::clone(&seen));
            engine().push(&[a, b, a], &[], 0, move |_| {
                std::thread::yield_now();
                s.lock().push((round, v.load(Ordering::SeqCst)));
                Ok(())
            });
        }
        engine().wait_to_write(a).unwrap();
        let seen = seen.lock();
        assert_eq!(seen.len(), 30);
        assert!(seen.iter().all(|(round, v)| round == v), "{seen:?}");
    }

    #[test]
    fn an_op_reading_and_writing_one_var_does_not_wait_for_itself() {
        let var = Var::new();
        let done = Arc::new(AtomicU64::new(0));
        let d = Arc::clone(&done);
        engine().push(&[var, var], &[var, var], 0, move |_| { d.fetch_add(1, Ordering::SeqCst); Ok(()) });
        engine().wait_to_write(var).unwrap();
        assert_eq!(done.load(Ordering::SeqCst), 1);
    }

    // The failure tests run on an engine of their own: a failure on the shared one would
    // surface at another test's `wait_all`.

    #[test]
    fn a_failure_poisons_what_the_op_writes_and_what_reads_it_and_is_reported_once() {
        let e = Engine::start();
        let (a, b, c) = (Var::new(), Var::new(), Var::new());
        let ran = Arc::new(AtomicU64::new(0));
        e.push(&[], &[a], 0, |_| Err(Error::new("the sum failed")));
        let r = Arc::clone(&ran);
        e.push(&[a], &[b], 0, move |_| {
            r.fetch_add(1, Ordering::SeqCst);
            Ok(())
        });
        let r = Arc::clone(&ran);
        e.push(&[], &[c], 0, move |_| {
            r.fetch_add(10, Ordering::SeqCst);
            Ok(())
        });
        e.wait_to_read(c).unwrap();
        assert_eq!(e.wait_to_read(b).unwrap_err().message(), "the sum failed");
        assert_eq!(ran.load(Ordering::SeqCst), 10, "an op reading a poisoned variable does not run");
        // One failure, shared: reported at the first wait, then gone everywhere (MXNet).
        e.wait_to_read(a).unwrap();
        e.wait_all().unwrap();
        // The variables work again.
        let r = Arc::clone(&ran);
        e.push(&[a], &[b], 0, move |_| {
            r.fetch_add(100, Ordering::SeqCst);
            Ok(())
        });
        e.wait_to_read(b).unwrap();
        assert_eq!(ran.load(Ordering::SeqCst), 110);
    }

    #[test]
    fn a_panicking_op_is_reported_at_wait_all_and_a_write_after_it_inherits_the_failure() {
        let e = Engine::start();
        let (a, b) = (Var::new(), Var::new());
        e.push(&[], &[a], 0, |_| panic!("kaboom"));
        e.push(&[b], &[a], 0, |_| Ok(()));
        let err = e.wait_all().unwrap_err();
        assert!(err.message().contains("panicked: kaboom"), "{err}");
        e.wait_all().unwrap();
        e.wait_to_write(a).unwrap();
        // A synchronous access is a wait too.
        e.push(&[], &[b], 0, |_| Err(Error::new("late")));
        assert_eq!(e.run_sync(&[b], &[], || 1).unwrap_err().message(), "late");
        assert_eq!(e.run_sync(&[b], &[], || 1).unwrap(), 1);
    }

    #[test]
    fn an_async_op_completes_when_its_work_finishes_on_another_thread() {
        let e = Engine::start();
        let (a, b) = (Var::new(), Var::new());
        let value = Arc::new(AtomicU64::new(0));
        let v = Arc::clone(&value);
        e.push_async(&[], &[a], 0, move |_, done| {
            std::thread::spawn(move || {
                std::thread::sleep(std::time::Duration::from_millis(30));
                v.store(42, Ordering::SeqCst);
                done.finish(Ok(()));
            });
        });
        let (v, seen) = (Arc::clone(&value), Arc::new(AtomicU64::new(0)));
        let s = Arc::clone(&seen);
        e.push(&[a], &[b], 0, move |_| {
            s.store(v.load(Ordering::SeqCst), Ordering::SeqCst);
            Ok(())
        });
        e.wait_to_read(b).unwrap();
        assert_eq!(seen.load(Ordering::SeqCst), 42, "a reader waits for the async op's completion");
        e.push_async(&[], &[a], 0, |_, done| {
            std::thread::spawn(move || done.finish(Err(Error::new("device error"))));
        });
        assert_eq!(e.wait_to_read(a).unwrap_err().message(), "device error");
        e.push_async(&[], &[a], 0, |_, done| drop(done));
        assert!(e.wait_to_read(a).unwrap_err().message().contains("ended without completing"));
        e.wait_all().unwrap();
    }

    #[test]
    fn a_tiny_device_op_runs_on_the_calling_thread_only_when_ready_and_alone() {
        let e = Engine::start();
        let (a, b) = (Var::new(), Var::new());
        let me = std::thread::current().id();
        let ran_on = |e: &'static Engine, var: Var| {
            let (tx, rx) = std::sync::mpsc::channel();
            e.push_device(&[], &[var], 0, DeviceOp { tiny: true, ..DeviceOp::default() }, move |_, done| {
                tx.send(std::thread::current().id()).unwrap();
                done.finish(Ok(()));
            });
            rx.recv().unwrap()
        };
        assert_eq!(ran_on(e, a), me, "alone and ready: enqueued by the caller");
        // Another op in flight (a device op whose work has not completed).
        let (tx, rx) = std::sync::mpsc::channel::<OpDone>();
        e.push_device(&[], &[b], 0, DeviceOp::default(), move |_, done| tx.send(done).unwrap());
        let pending = rx.recv().unwrap();
        assert!(ran_on(e, a) != me, "with other ops outstanding, a worker enqueues it");
        pending.finish(Ok(()));
        e.wait_all().unwrap();
        // Not ready (it waits for a write): released later, never on the caller.
        let (tx, rx) = std::sync::mpsc::channel::<OpDone>();
        e.push_device(&[], &[a], 0, DeviceOp::default(), move |_, done| tx.send(done).unwrap());
        let first = rx.recv().unwrap();
        let (tx2, rx2) = std::sync::mpsc::channel();
        e.push_device(&[], &[a], 0, DeviceOp { tiny: true, ..DeviceOp::default() }, move |_, done| {
            tx2.send(std::thread::current().id()).unwrap();
            done.finish(Ok(()));
        });
        // Completed elsewhere (as on a device's completion thread): op 2 runs there.
        let completer = std::thread::spawn(move || {
            first.finish(Ok(()));
            std::thread::current().id()
        })
        .join()
        .unwrap();
        assert_eq!(rx2.recv().unwrap(), completer);
        e.wait_all().unwrap();
    }

    #[test]
    fn an_op_on_the_stream_of_an_enqueued_op_runs_before_it_finishes_and_inherits_its_failure() {
        let e = Engine::start();
        let (a, b, c) = (Var::new(), Var::new(), Var::new());
        const STREAM: u64 = 7;
        let on = |stream| DeviceOp { stream: Some(stream), ..DeviceOp::default() };
        // The first op writes `a`; its work is enqueued (signalled) but not finished.
        let (tx, rx) = std::sync::mpsc::channel::<OpDone>();
        e.push_device(&[], &[a], 0, on(STREAM), move |_, done| tx.send(done).unwrap());
        let first = rx.recv().unwrap();
        // Waiting for it: one on its stream, one on another stream, one with none.
        let ran = Arc::new(Mutex::new(Vec::new()));
        let mut dones = Vec::new();
        for (name, how, write) in [("same", on(STREAM), b), ("other", on(STREAM + 1), c), ("none", DeviceOp::default(), c)] {
            let (ran, (tx, rx)) = (Arc::clone(&ran), std::sync::mpsc::channel::<OpDone>());
            e.push_device(&[a], &[write], 0, how, move |_, done| {
                ran.lock().push(name);
                tx.send(done).unwrap();
            });
            dones.push(rx);
        }
        assert!(ran.lock().is_empty(), "nothing runs before the first op's work is enqueued");
        first.stream_signal().enqueued(STREAM);
        let same = dones[0].recv_timeout(std::time::Duration::from_secs(5)).expect("the op on the same stream was released");
        assert_eq!(*ran.lock(), ["same"]);
        // Registered after the signal, an op on the same stream does not wait either.
        let (tx, rx) = std::sync::mpsc::channel::<OpDone>();
        e.push_device(&[a], &[b], 0, on(STREAM), move |_, done| tx.send(done).unwrap());
        // (It waits for `same`, which writes `b` and has not finished: finish that first.)
        same.finish(Ok(()));
        let later = rx.recv_timeout(std::time::Duration::from_secs(5)).expect("released without the first op finishing");
        // A tiny one, ready so, is enqueued by the calling thread (others are outstanding).
        let (d, (tx, rx)) = (Var::new(), std::sync::mpsc::channel());
        e.push_device(&[a], &[d], 0, DeviceOp { tiny: true, ..on(STREAM) }, move |_, done| {
            tx.send(std::thread::current().id()).unwrap();
            done.finish(Ok(()));
        });
        assert_eq!(rx.try_recv().ok(), Some(std::thread::current().id()), "a tiny stream-ordered op ran on the caller");
        assert!(!ran.lock().contains(&"other"), "another stream still waits");
        // The first op's work fails: the ops ordered behind it on its stream fail with it.
        first.finish(Err(Error::new("device fault")));
        later.finish(Ok(()));
        let err = e.wait_to_read(b).unwrap_err();
        assert!(err.message().contains("device fault"), "{}", err.message());
        // The ops that waited for it inherit the failure without running.
        for rx in &dones[1..] {
            assert!(rx.recv_timeout(std::time::Duration::from_secs(5)).is_err());
        }
        assert!(!ran.lock().contains(&"other") && !ran.lock().contains(&"none"));
        // (The failure was reported once, at the wait above.)
        e.wait_all().unwrap();
    }

    #[test]
    fn a_device_op_released_by_a_device_op_runs_on_the_thread_completing_it() {
        let e = Engine::start();
        let a = Var::new();
        let thread_of = |slot: &Arc<Mutex<Option<std::thread::ThreadId>>>| slot.lock().unwrap();
        // Device op 1 completes on a thread of its own (as from a device's completion thread).
        let (tx, rx) = std::sync::mpsc::channel::<OpDone>();
        e.push_device(&[], &[a], 0, DeviceOp::default(), move |_, done| tx.send(done).unwrap());
        let (second, third, heavy) = (Arc::new(Mutex::new(None)), Arc::new(Mutex::new(None)), Arc::new(Mutex::new(None)));
        let second_returned = Arc::new(AtomicBool::new(false));
        let (s, returned) = (Arc::clone(&second), Arc::clone(&second_returned));
        // Device op 2 waits for op 1; it finishes at once, releasing device op 3.
        e.push_device(&[], &[a], 0, DeviceOp::default(), move |_, done| {
            *s.lock() = Some(std::thread::current().id());
            done.finish(Ok(()));
            returned.store(true, Ordering::SeqCst);
        });
        let (t, returned) = (Arc::clone(&third), Arc::clone(&second_returned));
        e.push_device(&[], &[a], 0, DeviceOp::default(), move |_, done| {
            *t.lock() = Some((std::thread::current().id(), returned.load(Ordering::SeqCst)));
            done.finish(Ok(()));
        });
        // A device op over many arrays, released by op 3, is enqueued by a worker meanwhile.
        let many: Vec<Var> = (0..LIGHT_DEVICE_OP_ARRAYS).map(|_| Var::new()).collect();
        let mut writes = many.clone();
        writes.push(a);
        let hv = Arc::clone(&heavy);
        e.push_device(&[], &writes, 0, DeviceOp::default(), move |_, done| {
            *hv.lock() = Some(std::thread::current().id());
            done.finish(Ok(()));
        });
        // A host op after them runs on a worker, as always.
        let host = Arc::new(Mutex::new(None));
        let h = Arc::clone(&host);
        e.push(&[a], &[], 0, move |_| {
            *h.lock() = Some(std::thread::current().id());
            Ok(())
        });
        let completer = std::thread::spawn(move || {
            rx.recv().unwrap().finish(Ok(()));
            std::thread::current().id()
        });
        let completer = completer.join().unwrap();
        e.wait_all().unwrap();
        assert_eq!(thread_of(&second), completer, "the released device op ran where op 1 completed");
        // Not nested: op 3, released by op 2 while it ran there, ran there after op 2 returned.
        let (third_thread, after_second) = third.lock().unwrap();
        assert_eq!(third_thread, completer, "a light device op released meanwhile runs on the completing thread");
        assert!(after_second, "a device op ran nested in another's release");
        assert!(thread_of(&heavy) != completer, "a heavy device op released meanwhile waited for this thread");
        assert!(thread_of(&host) != completer, "a host op ran on the completing thread");
    }

    /// A pushed host op: its read and write tokens, and how it starts.
    pub(super) type PushedOp = (Vec<usize>, Vec<usize>, HostStart);

    /// A host engine that keeps what is pushed for the test to start, or to skip.
    #[derive(Default)]
    pub(super) struct RecordingHost {
        tokens: AtomicUsize,
        pub(super) pushed: Mutex<Vec<PushedOp>>,
        pub(super) completions: Arc<Mutex<Vec<Option<String>>>>,
    }

    impl Scheduler for RecordingHost {
        fn active(&self) -> bool {
            true
        }
        fn new_token(&self) -> Result<usize> {
            Ok(self.tokens.fetch_add(1, Ordering::SeqCst) + 1)
        }
        fn release_token(&self, _token: usize) {}
        fn push(&self, reads: &[usize], writes: &[usize], _priority: i32, start: HostStart) -> Result<()> {
            self.pushed.lock().push((reads.to_vec(), writes.to_vec(), start));
            Ok(())
        }
        fn wait(&self, _token: usize, _write: bool) -> Result<()> {
            Ok(())
        }
    }

    impl RecordingHost {
        /// Starts the oldest pushed op; returns its tokens.
        fn start_next(&self) -> (Vec<usize>, Vec<usize>) {
            self.start_next_with(None)
        }

        /// Starts the oldest pushed op, the host side refusing it with `refusal` if given.
        pub(super) fn start_next_with(&self, refusal: Option<String>) -> (Vec<usize>, Vec<usize>) {
            self.start_at(0, refusal)
        }

        /// Starts the `i`th oldest pushed op not started yet.
        pub(super) fn start_at(&self, i: usize, refusal: Option<String>) -> (Vec<usize>, Vec<usize>) {
            let (r, w, start) = self.pushed.lock().remove(i);
            let completions = Arc::clone(&self.completions);
            start(Box::new(move |failure| completions.lock().push(failure)), refusal);
            (r, w)
        }
    }

    #[test]
    fn a_host_engine_runs_the_ops_on_tokens_and_failures_cross_both_ways() {
        let host: &'static RecordingHost = Box::leak(Box::default());
        let e = Engine::start_on(host);
        let (a, b) = (Var::new(), Var::new());
        let ran = Arc::new(AtomicU64::new(0));
        let r = Arc::clone(&ran);
        // Listed twice, and read and written: the host gets each token once, writes winning.
        e.push(&[a, b], &[b, b], 0, move |_| {
            r.fetch_add(1, Ordering::SeqCst);
            Ok(())
        });
        assert_eq!(ran.load(Ordering::SeqCst), 0, "nothing runs before the host starts it");
        let (reads, writes) = host.start_next();
        let (ta, tb) = (e.host_token(a).unwrap().unwrap(), e.host_token(b).unwrap().unwrap());
        assert_eq!((reads, writes), (vec![ta], vec![tb]));
        assert_eq!(ran.load(Ordering::SeqCst), 1);
        assert_eq!(host.completions.lock().pop(), Some(None), "a finished op completes the host's");

        // A failing op fails the host's op with its message; the engine's wait reports it.
        e.push(&[], &[b], 0, |_| Err(Error::new("sum failed")));
        host.start_next();
        assert_eq!(host.completions.lock().pop(), Some(Some("sum failed".to_string())));
        assert_eq!(e.wait_to_read(b).unwrap_err().message(), "sum failed");

        // An op the host skips (a failure on its tokens) fails, and what it writes reports it.
        e.push(&[b], &[a], 0, |_| Ok(()));
        drop(host.pushed.lock().remove(0));
        assert!(e.wait_to_read(a).unwrap_err().message().contains("skipped"));

        // An op the host side refuses does not run: it fails with the reason, on both sides.
        let r = Arc::clone(&ran);
        e.push(&[], &[b], 0, move |_| {
            r.fetch_add(1, Ordering::SeqCst);
            Ok(())
        });
        host.start_next_with(Some("memory moved".to_string()));
        assert_eq!(ran.load(Ordering::SeqCst), 1, "a refused op does not run");
        assert_eq!(host.completions.lock().pop(), Some(Some("memory moved".to_string())));
        assert_eq!(e.wait_to_read(b).unwrap_err().message(), "memory moved");

        // An op reading a variable that holds a failure does not run: it inherits the failure,
        // and the host's op fails with it.
        e.push(&[], &[a], 0, |_| Err(Error::new("first")));
        host.start_next();
        let r = Arc::clone(&ran);
        e.push(&[a], &[b], 0, move |_| {
            r.fetch_add(1, Ordering::SeqCst);
            Ok(())
        });
        host.start_next();
        assert_eq!(ran.load(Ordering::SeqCst), 1);
        assert_eq!(host.completions.lock().pop(), Some(Some("first".to_string())));
        assert_eq!(e.wait_to_read(b).unwrap_err().message(), "first");

        // A token bound by the caller is the one the host gets; unbinding makes a new one.
        let c = Var::new();
        assert!(e.bind_host_token(c, 1000));
        assert!(!e.bind_host_token(c, 1001), "a variable's token is bound once");
        e.push(&[c], &[], 0, |_| Ok(()));
        assert_eq!(host.start_next().0, vec![1000]);
        e.release_host_token(c);
        assert_ne!(e.host_token(c).unwrap(), Some(1000));
        e.wait_all().unwrap();
    }
}
