//! Streams: each a FIFO of operations run in order by its own thread, asynchronous to the
//! caller. An operation may first wait for points in other streams (events, the legacy
//! default stream's implicit barriers).

use crate::config::config;
use crate::context::Context;
use crate::handles::{next_handle, Table};
use crate::result::CUresult;
use parking_lot::{Condvar, Mutex};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Weak};

/// How far a stream has got: operations submitted and completed, numbered from 1.
#[derive(Default)]
pub struct Progress {
    counts: Mutex<(u64, u64)>,
    changed: Condvar,
}

impl Progress {
    pub fn wait_for(&self, seq: u64) {
        let mut counts = self.counts.lock();
        while counts.1 < seq {
            self.changed.wait(&mut counts);
        }
    }

    pub fn is_done(&self, seq: u64) -> bool {
        self.counts.lock().1 >= seq
    }

    /// The point after everything submitted so far.
    pub fn tail(self: &Arc<Self>) -> Wait {
        Wait { progress: self.clone(), seq: self.counts.lock().0 }
    }

    fn complete(&self, seq: u64) {
        self.counts.lock().1 = seq;
        self.changed.notify_all();
    }
}

/// A point in a stream: done once its operation `seq` has completed.
#[derive(Clone)]
pub struct Wait {
    pub progress: Arc<Progress>,
    pub seq: u64,
}

impl Wait {
    pub fn block(&self) {
        self.progress.wait_for(self.seq)
    }

    pub fn is_done(&self) -> bool {
        self.progress.is_done(self.seq)
    }
}

/// One operation: returns Ok or the CUresult that makes its context's error sticky.
pub type Work = Box<dyn FnOnce() -> Result<(), CUresult> + Send>;

struct Job {
    seq: u64,
    waits: Vec<Wait>,
    /// An injected fault (CUDA_STANDIN_FAIL): the operation fails with 700 instead of running.
    fault: bool,
    work: Work,
}

pub struct Stream {
    pub handle: u64,
    /// The legacy default stream of its context (handle 0, CU_STREAM_LEGACY, per-thread).
    pub legacy: bool,
    /// Synchronises with the legacy default stream (not CU_STREAM_NON_BLOCKING).
    pub blocking: bool,
    pub context: Weak<Context>,
    sticky: Arc<AtomicI32>,
    progress: Arc<Progress>,
    queue: Mutex<mpsc::Sender<Job>>,
}

static STREAMS: Table<Stream> = Table::new();

pub const NON_BLOCKING: u32 = 0x1;

impl Stream {
    /// A new stream of `context` with its thread; `legacy` for the context's default stream.
    pub fn start(context: &Arc<Context>, legacy: bool, flags: u32) -> Arc<Stream> {
        let (sender, receiver) = mpsc::channel::<Job>();
        let progress = Arc::new(Progress::default());
        let stream = Arc::new(Stream {
            handle: next_handle(),
            legacy,
            blocking: flags & NON_BLOCKING == 0,
            context: Arc::downgrade(context),
            sticky: context.sticky.clone(),
            progress: progress.clone(),
            queue: Mutex::new(sender),
        });
        let sticky = context.sticky.clone();
        std::thread::Builder::new()
            .name(format!("standin-stream-{}", context.device))
            .stack_size(16 << 20)
            .spawn(move || run(receiver, progress, sticky))
            .expect("cuda-standin: cannot start a stream thread");
        if !legacy {
            STREAMS.insert(stream.handle, stream.clone());
        }
        context.add_stream(&stream);
        stream
    }

    pub fn lookup(handle: u64) -> Option<Arc<Stream>> {
        STREAMS.get(handle)
    }

    /// Forgets the handle; work already enqueued still runs, then the thread ends.
    pub fn destroy(handle: u64) -> Option<Arc<Stream>> {
        STREAMS.remove(handle)
    }

    pub fn progress(&self) -> &Arc<Progress> {
        &self.progress
    }

    /// The point after everything enqueued so far.
    pub fn tail(&self) -> Wait {
        self.progress.tail()
    }

    /// Enqueues `work` after `waits` (and the legacy stream's implicit barriers, which
    /// `context` supplies); returns the point after it.
    pub fn enqueue(&self, context: &Context, mut waits: Vec<Wait>, fault: bool, work: Work) -> Wait {
        waits.extend(context.barriers_for(self));
        let queue = self.queue.lock();
        let seq = {
            let mut counts = self.progress.counts.lock();
            counts.0 += 1;
            counts.0
        };
        // The thread ends only when the last Sender is gone, and this Stream holds one.
        let _ = queue.send(Job { seq, waits, fault, work });
        Wait { progress: self.progress.clone(), seq }
    }

    /// Waits for everything enqueued so far; the context's sticky error, if any.
    pub fn synchronize(&self) -> Result<(), CUresult> {
        self.tail().block();
        self.error()
    }

    /// CUDA_SUCCESS when idle, CUDA_ERROR_NOT_READY while work is pending.
    pub fn query(&self) -> Result<(), CUresult> {
        self.error()?;
        if self.tail().is_done() {
            Ok(())
        } else {
            Err(crate::result::NOT_READY)
        }
    }

    pub fn error(&self) -> Result<(), CUresult> {
        match self.sticky.load(Ordering::Acquire) {
            0 => Ok(()),
            code => Err(code),
        }
    }
}

/// A stream's thread: runs each job after its waits; once the context has faulted, later
/// jobs are skipped (as on a GPU, whose context is then unusable) but still complete, so no
/// waiter hangs.
fn run(jobs: mpsc::Receiver<Job>, progress: Arc<Progress>, sticky: Arc<AtomicI32>) {
    let delay = config().delay;
    for job in jobs {
        for wait in &job.waits {
            wait.block();
        }
        if !delay.is_zero() {
            std::thread::sleep(delay);
        }
        if sticky.load(Ordering::Acquire) == 0 {
            let outcome = if job.fault {
                Err(crate::result::ILLEGAL_ADDRESS)
            } else {
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(job.work)).unwrap_or(Err(crate::result::UNKNOWN))
            };
            if let Err(code) = outcome {
                let _ = sticky.compare_exchange(0, code, Ordering::AcqRel, Ordering::Acquire);
            }
        }
        progress.complete(job.seq);
    }
}
