//! How the processes of a distributed job reach each other: the [`Transport`] seam, and the
//! [`Node`] the worker, server and scheduler hold. Two transports implement it:
//! - `mpi`: the MPI plugin `libkvstore_mpi.so`, loaded at the first distributed store of a
//!   process; one node per process, kept in process globals (MPI itself is per process).
//! - [`loopback`]: every node of a job inside one process, for testing the distributed
//!   store's logic with `cargo test` instead of `mpirun`; all its state is per job.

pub mod loopback;
mod mpi;

pub use mpi::{abort_if_running as abort_mpi_job_if_running, start as start_mpi, Landing, PlacedAt};

use super::liveness::{self, Watch, What};
use super::role::Role;
use crate::ndarray::{NDArray, Payload, StorageType};
use std::ops::Range;
use std::sync::Arc;

/// What a node receives messages with: `(source rank, bytes)`.
pub type Handler = Arc<dyn Fn(usize, &[u8]) + Send + Sync>;

/// Bytes of a dense array that a message carries from where they lie: `range` of the array's
/// bytes. The sender orders the array's writers after the message's answer (an engine op
/// reading it until then); a transport that sends in place keeps the array read-locked
/// meanwhile (one that cannot, as for GPU memory, copies).
pub struct Body {
    array: NDArray,
    range: Range<usize>,
}

impl Body {
    /// `range` of dense `array`'s bytes (within them).
    pub fn new(array: &NDArray, range: Range<usize>) -> Body {
        debug_assert!(array.stype() == StorageType::Default && range.end <= array.size() * array.dtype().size());
        Body { array: array.clone(), range }
    }

    /// The message of `head` then a copy of these bytes.
    pub fn copied_after(&self, head: Vec<u8>) -> Vec<u8> {
        let mut message = head;
        self.array.read_bytes(|b| message.extend_from_slice(&b[self.range.clone()]));
        message
    }

    /// Calls `f` with the body's bytes.
    pub fn read<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
        self.array.read_bytes(|b| f(&b[self.range.clone()]))
    }

    /// The array's memory lock and the body's byte range within that memory.
    pub(crate) fn lock_and_range(&self) -> (&parking_lot::RwLock<Payload>, Range<usize>) {
        let (lock, view) = self.array.lock_and_range();
        (lock, view.start + self.range.start..view.start + self.range.end)
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.range.len()
    }

    /// Whether it has no bytes.
    pub fn is_empty(&self) -> bool {
        self.range.is_empty()
    }
}

/// Where the bodies of incoming two-part messages are received, for a transport that
/// receives them apart from their heads (MPI's): asked with each head, on the transport's
/// receiving thread, it may name a place (inside a [`Landing`] it holds), and the handler is
/// then not called for that message: [`Placement::placed`] is, with the head, once the body
/// is in.
pub trait Placement: Send + Sync {
    /// Where the `body_len` bytes after `head` from rank `source` go, or `None` (the handler
    /// gets head and body as one message). Must not wait on the handler's thread or a sender.
    fn place(&self, source: usize, head: &[u8], body_len: usize) -> Option<PlacedAt>;
    /// The body of the message of `head` from `source` is in the place `place` named.
    fn placed(&self, source: usize, head: &[u8]);
}

/// One node's connection to its job. Messages from one source arrive in the order they were
/// sent, on one receiver thread per node, which calls the handler.
pub trait Transport: Send + Sync {
    /// This node's rank in the job.
    fn rank(&self) -> usize;
    /// The role of every rank of the job, by rank.
    fn roles(&self) -> Vec<Role>;
    /// Sends `bytes` to rank `dest`. A message that cannot be delivered aborts the job: the
    /// sender would otherwise wait forever for its answer.
    fn send(&self, dest: usize, bytes: &[u8]);
    /// Sends `bytes` to rank `dest` and returns at once (the transport keeps them until they
    /// are sent). Messages to one rank arrive in the order they were sent, except that an
    /// `express` one (a small request whose order with the others does not matter, e.g. a
    /// pull the engine has already ordered after its push) may overtake the others still
    /// queued: a worker's pull requests and a server's acks then do not wait behind megabytes
    /// of values bound for the same rank. By default, [`Transport::send`].
    fn send_owned(&self, dest: usize, bytes: Vec<u8>, express: bool) {
        let _ = express;
        self.send(dest, &bytes)
    }
    /// Sends `head` followed by `body`'s bytes as one message, as [`Transport::send_owned`]
    /// does, without copying the body where the transport can send it in place. By default,
    /// one owned message (a copy).
    fn send_parts(&self, dest: usize, head: Vec<u8>, body: Body, express: bool) {
        self.send_owned(dest, body.copied_after(head), express)
    }
    /// Keeps this node's bulk sends to its destinations within `bytes` of each other in the
    /// order they were queued (0: no limit); the MPI plugin's `kvmpi_set_bulk_lead`. By
    /// default nothing (a transport that keeps no queues of its own).
    fn set_bulk_lead(&self, bytes: u64) {
        let _ = bytes;
    }
    /// Installs (or replaces) what handles this node's incoming messages.
    fn set_handler(&self, handler: Handler);
    /// Installs where message bodies may be received in place; by default none is (every
    /// message reaches the handler whole).
    fn set_placement(&self, placement: Arc<dyn Placement>) {
        let _ = placement;
    }
    /// The host rank `rank` runs on (MPI's processor name), for messages.
    fn host(&self, rank: usize) -> String;
    /// How long nothing has been heard from rank `rank` (the transport's heartbeats: a live
    /// process keeps beating however busy it is); `None` where the transport does not watch
    /// its peers (then no peer is ever judged silent).
    fn silence(&self, rank: usize) -> Option<std::time::Duration>;
    /// A barrier over every node of the job.
    fn barrier_all(&self);
    /// Ends the whole job (never returns to the caller).
    fn abort(&self, code: i32) -> !;
    /// Ends this process where it hears from no other rank (its host is cut off from the job):
    /// telling the job is hopeless, and whatever runs this process on its host for the job
    /// would wait on the lost connection for as long as TCP retransmits; it goes too.
    fn abort_isolated(&self, code: i32) -> ! {
        self.abort(code)
    }
    /// Stops receiving: this node has left the job.
    fn finalize(&self);
}

/// This node's place in its job, over a transport.
pub struct Node {
    /// Rank in the job.
    pub rank: usize,
    /// The role of every rank.
    pub roles: Vec<Role>,
    transport: Box<dyn Transport>,
    /// What this node waits for, and from whom (see `liveness`).
    pub watch: Arc<Watch>,
}

impl Node {
    /// The node of `transport` (its rank and roles are read once: they never change).
    pub fn new(transport: Box<dyn Transport>) -> Node {
        Node { rank: transport.rank(), roles: transport.roles(), transport, watch: Arc::default() }
    }

    /// Starts the monitor that aborts the job when a peer this node waits on has been silent
    /// for longer than `timeout` (see `liveness`; a no-op where the transport does not watch
    /// its peers, as loopback's).
    pub fn start_monitor(self: &Arc<Node>, timeout: Option<std::time::Duration>) {
        let peers: Arc<dyn liveness::Peers> = Arc::clone(self) as Arc<dyn liveness::Peers>;
        liveness::start_monitor(&self.watch, Arc::downgrade(&peers), timeout);
    }

    /// "server 1 (MPI rank 0)": rank `rank` by its role.
    pub fn describe(&self, rank: usize) -> String {
        match self.roles.get(rank) {
            Some(&role) => {
                let index = self.ranks_of(role).iter().position(|&r| r == rank).unwrap_or(0);
                format!("{} {index} (MPI rank {rank})", role.name())
            }
            None => format!("MPI rank {rank}"),
        }
    }

    /// See [`Transport::host`].
    pub fn host(&self, rank: usize) -> String {
        self.transport.host(rank)
    }

    /// This node's role.
    pub fn role(&self) -> Role {
        self.roles[self.rank]
    }

    /// The ranks of `role`, in rank order (a role's group rank is its index).
    pub fn ranks_of(&self, role: Role) -> Vec<usize> {
        self.roles.iter().enumerate().filter(|(_, r)| **r == role).map(|(i, _)| i).collect()
    }

    /// See [`Transport::set_handler`].
    pub fn set_handler(&self, handler: Handler) {
        self.transport.set_handler(handler)
    }

    /// See [`Transport::set_bulk_lead`].
    pub fn set_bulk_lead(&self, bytes: u64) {
        self.transport.set_bulk_lead(bytes)
    }

    /// See [`Transport::set_placement`].
    pub fn set_placement(&self, placement: Arc<dyn Placement>) {
        self.transport.set_placement(placement)
    }

    /// See [`Transport::send`]; the monitor knows that this node waits for `dest` meanwhile.
    pub fn send(&self, dest: usize, bytes: &[u8]) {
        let _waiting = self.watch.wait(Some(dest), What::Delivery { bytes: bytes.len() });
        self.transport.send(dest, bytes)
    }

    /// See [`Transport::send_owned`].
    pub fn send_owned(&self, dest: usize, bytes: Vec<u8>, express: bool) {
        self.transport.send_owned(dest, bytes, express)
    }

    /// See [`Transport::send_parts`].
    pub fn send_parts(&self, dest: usize, head: Vec<u8>, body: Body, express: bool) {
        self.transport.send_parts(dest, head, body, express)
    }

    /// See [`Transport::barrier_all`]; `when` says which one, in the monitor's messages
    /// ("at the start", "at exit").
    pub fn barrier_all(&self, when: &'static str) {
        let _waiting = self.watch.wait(None, What::AllNodeBarrier(when));
        self.transport.barrier_all()
    }

    /// See [`Transport::abort`].
    pub fn abort(&self, code: i32) -> ! {
        self.transport.abort(code)
    }

    /// See [`Transport::finalize`]; the monitor stops first (this node waits for no one).
    pub fn finalize(&self) {
        self.watch.stop();
        self.transport.finalize()
    }
}

impl liveness::Peers for Node {
    fn me(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.roles.len()
    }

    fn silence(&self, rank: usize) -> Option<std::time::Duration> {
        self.transport.silence(rank)
    }

    fn describe(&self, rank: usize) -> String {
        Node::describe(self, rank)
    }

    fn host(&self, rank: usize) -> String {
        self.transport.host(rank)
    }

    fn abort(&self, code: i32) -> ! {
        self.transport.abort(code)
    }

    fn abort_isolated(&self, code: i32) -> ! {
        self.transport.abort_isolated(code)
    }
}

/// The text of a caught panic.
pub(crate) fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_string())
}
