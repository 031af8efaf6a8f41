//! A distributed job inside one process: every node (worker, server, scheduler) is an
//! endpoint of a [`LoopbackJob`], so the distributed store's logic runs under `cargo test`
//! without `mpirun`. It behaves as the MPI transport where the store depends on it: each
//! endpoint has one receiver thread that calls its handler, in send order per source (one
//! queue per endpoint, filled by the senders); `barrier_all` waits for every endpoint.
//!
//! Nothing here is a process global, and nothing reaches MPI: `finalize` stops only the
//! endpoint's receiver, and `abort` records the code on the job and panics the calling
//! thread (it wakes the job's barriers, which then panic too) instead of ending the process.

use super::{panic_text, Handler, Node, Transport};
use crate::store::dist::role::Role;
use crossbeam::channel::{unbounded, Receiver, Sender};
use parking_lot::{Condvar, Mutex, RwLock};
use std::sync::Arc;

/// What an endpoint's queue carries.
enum Delivery {
    /// A message from rank `.0`.
    Message(usize, Vec<u8>),
    /// Ends the receiver thread (the endpoint was finalized).
    Stop,
}

/// A barrier that can be broken by an abort (`std::sync::Barrier` cannot).
struct AbortableBarrier {
    /// (endpoints arrived in this generation, generation)
    state: Mutex<(usize, u64)>,
    released: Condvar,
}

/// The shared state of one in-process job.
pub struct LoopbackJob {
    roles: Vec<Role>,
    /// Each endpoint's queue, by rank.
    queues: Vec<Sender<Delivery>>,
    barrier: AbortableBarrier,
    /// The first abort: (rank, code).
    aborted: Mutex<Option<(usize, i32)>>,
    /// Bytes sent, by `from * ranks + to`.
    traffic: Vec<std::sync::atomic::AtomicU64>,
}

impl LoopbackJob {
    /// A job of one endpoint per role, ranks in the order given; returns the job (to observe
    /// aborts) and the nodes, by rank. Each receiver thread starts with its first handler;
    /// messages sent before that wait in its queue.
    pub fn start(roles: &[Role]) -> (Arc<LoopbackJob>, Vec<Arc<Node>>) {
        let (queues, inboxes): (Vec<_>, Vec<_>) = roles.iter().map(|_| unbounded()).unzip();
        let job = Arc::new(LoopbackJob {
            roles: roles.to_vec(),
            queues,
            barrier: AbortableBarrier { state: Mutex::new((0, 0)), released: Condvar::new() },
            aborted: Mutex::new(None),
            traffic: (0..roles.len() * roles.len()).map(|_| std::sync::atomic::AtomicU64::new(0)).collect(),
        });
        let nodes = inboxes
            .into_iter()
            .enumerate()
            .map(|(rank, inbox)| {
                let endpoint = Endpoint {
                    rank,
                    job: Arc::clone(&job),
                    inbox: Mutex::new(Some(inbox)),
                    handler: Arc::new(RwLock::new(None)),
                    receiver: Mutex::new(None),
                };
                Arc::new(Node::new(Box::new(endpoint)))
            })
            .collect();
        (job, nodes)
    }

    /// The first abort of the job, if any: (rank, code).
    pub fn aborted(&self) -> Option<(usize, i32)> {
        *self.aborted.lock()
    }

    /// The bytes rank `from` has sent rank `to` so far.
    pub fn traffic(&self, from: usize, to: usize) -> u64 {
        self.traffic.get(from * self.roles.len() + to).map_or(0, |t| t.load(std::sync::atomic::Ordering::Relaxed))
    }

    fn abort(&self, rank: usize, code: i32) {
        self.aborted.lock().get_or_insert((rank, code));
        // Taking the barrier's lock orders the abort before any waiter's next check.
        let _state = self.barrier.state.lock();
        self.barrier.released.notify_all();
    }

    fn check_not_aborted(&self) {
        if let Some((rank, code)) = self.aborted() {
            panic!("the loopback job was aborted by rank {rank} (code {code})");
        }
    }

    fn barrier_all(&self) {
        let mut state = self.barrier.state.lock();
        self.check_not_aborted();
        let generation = state.1;
        state.0 += 1;
        if state.0 == self.roles.len() {
            *state = (0, generation + 1);
            self.barrier.released.notify_all();
            return;
        }
        while state.1 == generation {
            self.barrier.released.wait(&mut state);
            if state.1 == generation {
                self.check_not_aborted();
            }
        }
    }
}

/// One node of a loopback job.
struct Endpoint {
    rank: usize,
    job: Arc<LoopbackJob>,
    /// The receiving end of this endpoint's queue, until the receiver thread takes it.
    inbox: Mutex<Option<Receiver<Delivery>>>,
    handler: Arc<RwLock<Option<Handler>>>,
    receiver: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Endpoint {
    /// The receiver thread: as the MPI plugin's, it calls the handler for each message in
    /// turn; a handler's panic aborts the job (its sender would wait forever for a reply).
    fn start_receiver(&self, inbox: Receiver<Delivery>) {
        let (rank, handler, job) = (self.rank, Arc::clone(&self.handler), Arc::clone(&self.job));
        let thread = std::thread::Builder::new().name(format!("kvstore-loopback-{rank}")).spawn(move || {
            while let Ok(Delivery::Message(source, bytes)) = inbox.recv() {
                // After finalize there is no handler: the message is dropped, as MPI's.
                let Some(h) = handler.read().clone() else { continue };
                if let Err(payload) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| h(source, &bytes))) {
                    eprintln!(
                        "libkvstore: internal error handling a message from rank {source} on loopback rank {rank}: {}; aborting the loopback job",
                        panic_text(payload.as_ref())
                    );
                    job.abort(rank, 1);
                    return;
                }
            }
        });
        match thread {
            Ok(t) => *self.receiver.lock() = Some(t),
            Err(e) => {
                eprintln!("libkvstore: the receiver thread of loopback rank {rank} could not start: {e}");
                self.abort(1);
            }
        }
    }
}

impl Transport for Endpoint {
    fn rank(&self) -> usize {
        self.rank
    }

    fn roles(&self) -> Vec<Role> {
        self.job.roles.clone()
    }

    fn send(&self, dest: usize, bytes: &[u8]) {
        if let Some(t) = self.job.traffic.get(self.rank * self.job.roles.len() + dest) {
            t.fetch_add(bytes.len() as u64, std::sync::atomic::Ordering::Relaxed);
        }
        let delivered = self.job.queues.get(dest).is_some_and(|q| q.send(Delivery::Message(self.rank, bytes.to_vec())).is_ok());
        if !delivered {
            eprintln!("libkvstore: loopback rank {} could not send {} bytes to rank {dest} (no such rank, or it has finalized)", self.rank, bytes.len());
            self.abort(1);
        }
    }

    fn set_handler(&self, handler: Handler) {
        *self.handler.write() = Some(handler);
        let inbox = self.inbox.lock().take();
        if let Some(inbox) = inbox {
            self.start_receiver(inbox);
        }
    }

    /// Each node its own host, as on a cluster.
    fn host(&self, rank: usize) -> String {
        format!("loopback-{rank}")
    }

    /// Loopback nodes share one process: none is ever silent.
    fn silence(&self, _rank: usize) -> Option<std::time::Duration> {
        None
    }

    fn barrier_all(&self) {
        self.job.barrier_all()
    }

    fn abort(&self, code: i32) -> ! {
        self.job.abort(self.rank, code);
        panic!("loopback rank {} aborted the job (code {code})", self.rank)
    }

    /// Drops the handler (it may hold this node: the cycle ends here) and ends the receiver
    /// thread once it has handled what was queued before.
    fn finalize(&self) {
        *self.handler.write() = None;
        let _ = self.job.queues[self.rank].send(Delivery::Stop);
        let receiver = self.receiver.lock().take();
        if let Some(t) = receiver {
            if t.thread().id() != std::thread::current().id() {
                let _ = t.join();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn recorder(node: &Node) -> Receiver<(usize, Vec<u8>, Option<String>)> {
        let (tx, rx) = unbounded();
        node.set_handler(Arc::new(move |source, bytes| {
            let _ = tx.send((source, bytes.to_vec(), std::thread::current().name().map(str::to_string)));
        }));
        rx
    }

    #[test]
    fn messages_reach_the_destination_on_its_receiver_thread_in_order_per_source() {
        let (_job, nodes) = LoopbackJob::start(&[Role::Server, Role::Worker, Role::Worker]);
        assert_eq!(nodes[2].ranks_of(Role::Worker), vec![1, 2]);
        assert_eq!((nodes[2].rank, nodes[2].role()), (2, Role::Worker));
        // Sent before the handler exists: queued, not lost.
        nodes[1].send(0, b"early");
        let inbox = recorder(&nodes[0]);
        let senders: Vec<_> = [1, 2]
            .into_iter()
            .map(|src| {
                let node = Arc::clone(&nodes[src]);
                std::thread::spawn(move || (0..100u8).for_each(|i| node.send(0, &[src as u8, i])))
            })
            .collect();
        senders.into_iter().for_each(|t| t.join().unwrap());
        let got: Vec<_> = (0..201).map(|_| inbox.recv_timeout(Duration::from_secs(10)).unwrap()).collect();
        assert_eq!(got[0].0, 1);
        assert_eq!(got[0].1, b"early");
        for src in [1usize, 2] {
            let seq: Vec<u8> = got.iter().filter(|m| m.0 == src && m.1.len() == 2).map(|m| m.1[1]).collect();
            assert_eq!(seq, (0..100).collect::<Vec<u8>>(), "messages from rank {src} out of order");
        }
        assert!(got.iter().all(|m| m.2.as_deref() == Some("kvstore-loopback-0")));
        nodes[0].finalize();
        assert!(std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| nodes[1].send(0, b"late"))).is_err(), "a send to a finalized rank is not lost silently");
    }

    #[test]
    fn barrier_all_waits_for_every_endpoint() {
        let (_job, nodes) = LoopbackJob::start(&[Role::Server, Role::Worker, Role::Scheduler]);
        let passed = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let threads: Vec<_> = nodes[..2]
            .iter()
            .map(|n| {
                let (n, passed) = (Arc::clone(n), Arc::clone(&passed));
                std::thread::spawn(move || {
                    n.barrier_all("in a test");
                    passed.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    n.barrier_all("in a test");
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(passed.load(std::sync::atomic::Ordering::SeqCst), 0, "the barrier let two of three endpoints through");
        nodes[2].barrier_all("in a test");
        nodes[2].barrier_all("in a test");
        threads.into_iter().for_each(|t| t.join().unwrap());
        assert_eq!(passed.load(std::sync::atomic::Ordering::SeqCst), 2);
    }

    #[test]
    fn a_handler_panic_aborts_the_job_and_breaks_its_barriers_not_the_process() {
        let (job, nodes) = LoopbackJob::start(&[Role::Server, Role::Worker]);
        nodes[0].set_handler(Arc::new(|_, _| panic!("handler failure")));
        let waiting = {
            let n = Arc::clone(&nodes[1]);
            std::thread::spawn(move || n.barrier_all("in a test"))
        };
        nodes[1].send(0, b"x");
        assert!(waiting.join().is_err(), "the barrier returned normally after an abort");
        assert_eq!(job.aborted(), Some((0, 1)));
        assert!(std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| nodes[1].barrier_all("in a test"))).is_err());
    }
}
