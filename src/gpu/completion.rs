//! Completing engine ops from GPU events without blocking a worker: an op enqueues its GPU
//! work, records an event, and hands the event, its completion and a keep-alive of its arrays
//! to the device's completion thread. The thread waits for events in the order they were
//! recorded and runs each completion after its event fired — so completions run in order,
//! a failed event fails its own op only, and the arrays stay alive until their work is done.
//!
//! Generic over the event so that the ordering is tested without a driver; the GPU backend
//! plugs in CUDA events (`cuEventSynchronize` on a non-blocking-sync event).

use crossbeam::channel::{unbounded, Receiver, Sender};
use std::thread::JoinHandle;

/// Something the completion thread can wait for.
pub trait Event: Send + 'static {
    /// Blocks until the work before the event finished; Err with the CUDA error otherwise.
    fn wait(&self) -> Result<(), String>;
}

/// What runs when the event fired: the op's completion, told whether the GPU work failed.
pub type Completion = Box<dyn FnOnce(Result<(), String>) + Send>;

struct Pending<E> {
    event: E,
    completion: Completion,
    keep_alive: Box<dyn Send>,
}

/// A device's completion thread.
pub struct CompletionThread<E: Event> {
    sender: Option<Sender<Pending<E>>>,
    thread: Option<JoinHandle<()>>,
}

impl<E: Event> CompletionThread<E> {
    /// Starts the thread (named for the device).
    pub fn start(name: &str) -> std::io::Result<Self> {
        let (sender, receiver): (Sender<Pending<E>>, Receiver<Pending<E>>) = unbounded();
        // A pinned worker that starts it must not hand it its one CPU.
        let _spread = crate::base::affinity::unpinned();
        let thread = std::thread::Builder::new().name(name.to_string()).spawn(move || {
            while let Some(p) = next(&receiver) {
                let outcome = p.event.wait();
                (p.completion)(outcome);
                // Dropped only now: the arrays outlive their GPU work and the completion.
                drop(p.keep_alive);
            }
        })?;
        Ok(CompletionThread { sender: Some(sender), thread: Some(thread) })
    }

    /// Hands over an op's event, completion and arrays. Fails only after shutdown.
    pub fn submit(&self, event: E, completion: Completion, keep_alive: Box<dyn Send>) -> Result<(), String> {
        let sender = self.sender.as_ref().ok_or("the GPU completion thread has shut down")?;
        sender
            .send(Pending { event, completion, keep_alive })
            .map_err(|_| "the GPU completion thread has stopped".to_string())
    }

    /// Completes everything submitted, then stops the thread (`MXNotifyShutdown`, exit).
    pub fn shutdown(&mut self) {
        self.sender.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// How long the completion thread polls for the next op before it sleeps: ops come in
/// bursts (a call's batches, a push then its pull, one iteration after another), and a sleeping
/// thread's wake-up costs tens of microseconds on a VM, more than a small op's GPU work.
const POLL: std::time::Duration = std::time::Duration::from_micros(100);

/// The next op handed over, polled for [`POLL`] then waited for; `None` after shutdown.
fn next<E>(receiver: &Receiver<Pending<E>>) -> Option<Pending<E>> {
    let start = std::time::Instant::now();
    loop {
        match receiver.try_recv() {
            Ok(p) => return Some(p),
            Err(crossbeam::channel::TryRecvError::Disconnected) => return None,
            Err(crossbeam::channel::TryRecvError::Empty) if start.elapsed() < POLL => std::hint::spin_loop(),
            Err(crossbeam::channel::TryRecvError::Empty) => return receiver.recv().ok(),
        }
    }
}

impl<E: Event> Drop for CompletionThread<E> {
    fn drop(&mut self) {
        self.shutdown();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use parking_lot::{Condvar, Mutex};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    /// An event fired by the test: (fired, outcome).
    #[derive(Clone, Default)]
    struct TestEvent(Arc<(Mutex<Option<Outcome>>, Condvar)>);

    type Outcome = Result<(), String>;

    impl TestEvent {
        fn fire(&self, outcome: Result<(), String>) {
            *self.0 .0.lock() = Some(outcome);
            self.0 .1.notify_all();
        }
    }

    impl Event for TestEvent {
        fn wait(&self) -> Result<(), String> {
            let mut g = self.0 .0.lock();
            while g.is_none() {
                self.0 .1.wait(&mut g);
            }
            g.clone().unwrap_or(Ok(()))
        }
    }

    struct Alive(Arc<AtomicUsize>);
    impl Drop for Alive {
        fn drop(&mut self) {
            self.0.fetch_sub(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn completions_run_in_submission_order_after_their_events_and_errors_stay_with_their_op() {
        let mut t: CompletionThread<TestEvent> = CompletionThread::start("test-gpu-completion").unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let alive = Arc::new(AtomicUsize::new(3));
        let events: Vec<TestEvent> = (0..3).map(|_| TestEvent::default()).collect();
        for (i, e) in events.iter().enumerate() {
            let log = log.clone();
            t.submit(
                e.clone(),
                Box::new(move |r| log.lock().push((i, r))),
                Box::new(Alive(alive.clone())),
            )
            .unwrap();
        }
        // The last event fires first: nothing completes until the first one does.
        events[2].fire(Ok(()));
        events[1].fire(Err("CUDA error 700".into()));
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert!(log.lock().is_empty());
        assert_eq!(alive.load(Ordering::SeqCst), 3, "arrays are kept while their work is pending");
        events[0].fire(Ok(()));
        t.shutdown();
        assert_eq!(*log.lock(), [(0, Ok(())), (1, Err("CUDA error 700".to_string())), (2, Ok(()))]);
        assert_eq!(alive.load(Ordering::SeqCst), 0, "keep-alives are released after completion");
        assert!(t.submit(TestEvent::default(), Box::new(|_| {}), Box::new(())).is_err());
    }
}
