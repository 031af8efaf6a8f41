//! libkvstore's MPI transport: a small C ABI over Open MPI, loaded by libkvstore at the first
//! distributed store so that a program that never makes one never needs MPI.
//!
//! What it offers: MPI initialised with `MPI_THREAD_MULTIPLE` on a thread this library owns
//! (which also finalises it), a private duplicate of the world communicator for messages and
//! all-node barriers, a communicator per role colour for group barriers, posted byte sends
//! with a tag (`kvmpi_post`: returns at once, the bytes released when sent; `kvmpi_post_parts`:
//! a head and a body sent each from where it lies, received as one message), one progress
//! thread that sends and receives several messages at once in both directions (a send never
//! waits for a receive, nor a receive for a send), a dispatch thread handing every message to
//! a callback, an all-gather of one int and of the processor names, heartbeats on a
//! communicator of their own (so that a peer that is busy, or whose data messages wait behind
//! a blocked handler, still shows it is alive, and one that is stopped or cut off shows
//! silence), and abort. Barriers and blocking sends poll with a sleeping backoff: they never
//! spin, and a thread of the caller (libkvstore's monitor) can end the job with `kvmpi_abort`
//! while they wait. Every function returns 0 on success and a non-zero code otherwise.

use mpi::ffi;
use mpi::raw::AsRaw;
use std::collections::{HashMap, VecDeque};
use mpi::topology::{Color, Communicator, SimpleCommunicator};
use mpi::traits::*;
use mpi::Threading;
use std::os::raw::{c_int, c_void};
use std::sync::mpsc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use std::thread::JoinHandle;

/// The version of this C ABI; libkvstore refuses a plugin of another version.
pub const KVMPI_ABI_VERSION: c_int = 6;

/// The tag of the message a process sends itself to stop its receiver thread.
const STOP_TAG: i32 = 32000;

/// A message posted in two parts (`kvmpi_post_parts`) travels as two MPI messages: its head
/// with the tag plus this, then its body with the tag. Callers' tags stay below it. The head
/// ends with the body's length (`BODY_LEN_BYTES`, little-endian), so that its receiver posts
/// the body's receive as soon as the head is in, before the body has arrived: Open MPI then
/// unpacks the body straight into the receive's buffer, where a body that arrives first is
/// copied out of the socket's fragments once to be kept and once more when it is received.
const HEAD_TAG_OFFSET: c_int = 8192;
/// The length of a head's trailer: the body's length in bytes.
const BODY_LEN_BYTES: usize = 8;
/// Added to the tag of a two-part message whose body was received where the placement
/// callback asked (see [`kvmpi_start_receiver`]): its delivery carries the head alone.
pub const PLACED_TAG_OFFSET: c_int = 16384;

/// The communicators, shared by every thread of the process.
struct Comms {
    world: SimpleCommunicator,
    group: SimpleCommunicator,
    /// Heartbeats only: they never queue behind, or match the probes of, store messages.
    beat: SimpleCommunicator,
}

// SAFETY: MPI was initialised with MPI_THREAD_MULTIPLE (checked in `kvmpi_init`), under which
// every MPI call may be made from any thread concurrently; the communicator handles are plain
// identifiers that are only freed at finalize, after every other thread has stopped using them.
unsafe impl Send for Comms {}
// SAFETY: as above.
unsafe impl Sync for Comms {}

static COMMS: OnceLock<Comms> = OnceLock::new();

/// The owner thread (it finalises MPI when told) and the receiver thread.
struct Threads {
    finalize: Option<mpsc::Sender<()>>,
    owner: Option<JoinHandle<()>>,
    /// The progress thread.
    receiver: Option<JoinHandle<()>>,
    /// The dispatch thread.
    dispatch: Option<JoinHandle<()>>,
    /// The heartbeat thread and its stop flag.
    heartbeat: Option<(Arc<AtomicBool>, JoinHandle<()>)>,
}

static THREADS: Mutex<Threads> = Mutex::new(Threads { finalize: None, owner: None, receiver: None, dispatch: None, heartbeat: None });

/// A message callback: `(ctx, source world rank, tag, data, len)`; `data` is valid during the
/// call only.
pub type KvmpiReceive = extern "C" fn(*mut c_void, c_int, c_int, *const u8, usize);

/// A placement callback: `(ctx, source world rank, tag, head, head length, body length)` ->
/// where the body of the two-part message whose head this is will be received, valid for
/// writing `body length` bytes until that message's delivery; NULL for a buffer of the
/// plugin's (the delivery then carries head and body as one message). Called on the progress
/// thread: it must not wait on anything the dispatch thread or a sender may hold.
pub type KvmpiPlace = extern "C" fn(*mut c_void, c_int, c_int, *const u8, usize, usize) -> *mut u8;

fn comms() -> Option<&'static Comms> {
    COMMS.get()
}

/// How far, in bytes queued, a bulk send may run ahead of the oldest bulk message still
/// waiting for another destination (0: no limit); see [`kvmpi_set_bulk_lead`].
static BULK_LEAD: AtomicU64 = AtomicU64::new(0);

/// Keeps this process's bulk sends to its destinations in step: a bulk message starts only
/// while it was queued at most `bytes` after the oldest bulk message still waiting for any
/// destination (0, the default: each destination's queue goes at its own pace). A worker sets
/// it: its push to one server must not run far ahead of its push to another, since a sync
/// round waits for every worker's part, and a server whose share from this worker lags
/// answers late while the other's link from it is busy with parts that are early. Takes
/// effect for messages started after the call.
#[no_mangle]
pub extern "C" fn kvmpi_set_bulk_lead(bytes: u64) {
    BULK_LEAD.store(bytes, Ordering::Relaxed);
}

/// The ABI version of this plugin.
#[no_mangle]
pub extern "C" fn kvmpi_abi_version() -> c_int {
    KVMPI_ABI_VERSION
}

/// Initialises MPI (`MPI_THREAD_MULTIPLE`) on a thread owned by this library, duplicates the
/// world communicator and splits it by `color`; writes this process's world rank and size.
/// Returns 1 if MPI was already initialised by this plugin, 2 if MPI cannot be initialised
/// or lacks thread support.
///
/// # Safety
/// `rank` and `size` are each NULL or valid for writing one `c_int`.
#[no_mangle]
pub unsafe extern "C" fn kvmpi_init(color: c_int, rank: *mut c_int, size: *mut c_int) -> c_int {
    let mut threads = match THREADS.lock() {
        Ok(t) => t,
        Err(_) => return 3,
    };
    if COMMS.get().is_some() || threads.owner.is_some() {
        return 1;
    }
    tcp_defaults();
    let (ready_tx, ready_rx) = mpsc::channel::<bool>();
    let (fin_tx, fin_rx) = mpsc::channel::<()>();
    let owner = std::thread::Builder::new().name("kvstore-mpi-owner".into()).spawn(move || {
        let Some((universe, threading)) = mpi::initialize_with_threading(Threading::Multiple) else {
            let _ = ready_tx.send(false);
            return;
        };
        if threading != Threading::Multiple {
            let _ = ready_tx.send(false);
            drop(universe);
            return;
        }
        let world = universe.world().duplicate();
        let group = world.split_by_color(Color::with_value(color.max(0))).unwrap_or_else(|| world.duplicate());
        let beat = world.duplicate();
        let _ = COMMS.set(Comms { world, group, beat });
        let _ = ready_tx.send(true);
        // Wait for finalize (or for the library to be unloaded with the process).
        let _ = fin_rx.recv();
        // `COMMS` lives in a static: its communicators are never freed, which MPI_Finalize
        // allows. Dropping the universe finalises MPI on this, the initialising thread.
        drop(universe);
    });
    let Ok(owner) = owner else { return 2 };
    if ready_rx.recv() != Ok(true) {
        let _ = owner.join();
        return 2;
    }
    threads.owner = Some(owner);
    threads.finalize = Some(fin_tx);
    let Some(c) = comms() else { return 2 };
    if !rank.is_null() {
        // SAFETY: the caller passes a valid out-pointer or NULL.
        unsafe { *rank = c.world.rank() };
    }
    if !size.is_null() {
        // SAFETY: as above.
        unsafe { *size = c.world.size() };
    }
    0
}

/// Open MPI TCP settings this library's traffic needs, each applied unless the job sets it
/// (`--mca NAME VALUE` reaches the processes as `OMPI_MCA_NAME`): messages up to 8 MiB go
/// eagerly. Above Open MPI's default eager limit (64 KiB) a message waits for a rendezvous
/// handshake, whose answer rides the opposite direction of the link, behind the megabytes
/// of values queued there while pushes and pulls overlap: on the 1 Gbit/s test bed (2
/// workers + 2 servers, ResNet-50) that held the links at about 600 Mbit/s each way, 1.50
/// s/iter, against 1.07 with every part eager. Messages over the limit still take the
/// handshake (their own transfer then dwarfs it). Read by MPI_Init, so set before it.
const TCP_DEFAULTS: [(&str, &str); 3] =
    [("btl_tcp_eager_limit", "8388608"), ("btl_tcp_rndv_eager_limit", "8388608"), ("btl_tcp_max_send_size", "8388608")];

fn tcp_defaults() {
    for (name, value) in TCP_DEFAULTS {
        let var = format!("OMPI_MCA_{name}");
        if std::env::var_os(&var).is_none() {
            std::env::set_var(var, value);
        }
    }
}

/// Gathers one int from every process into `out` (world-size entries, in world-rank order).
///
/// # Safety
/// `out` is NULL or valid for writing `n` `c_int`s.
#[no_mangle]
pub unsafe extern "C" fn kvmpi_allgather_int(value: c_int, out: *mut c_int, n: usize) -> c_int {
    let Some(c) = comms() else { return 1 };
    if out.is_null() || n != c.world.size() as usize {
        return 2;
    }
    // SAFETY: `out` points at `n` ints (checked non-null, and `n` is the world size as asked).
    let out = unsafe { std::slice::from_raw_parts_mut(out, n) };
    c.world.all_gather_into(&value, out);
    0
}

/// Frees (or signals) a posted message once MPI is done with its bytes: `(ctx)`, called once,
/// on the progress thread.
pub type KvmpiRelease = extern "C" fn(*mut c_void);

/// A posted message: its bytes stay valid until `release(ctx)` is called.
struct Outgoing {
    dest: c_int,
    tag: c_int,
    data: *const u8,
    len: usize,
    /// The second part of a two-part message (`body_len` 0: none).
    body: *const u8,
    body_len: usize,
    release: KvmpiRelease,
    ctx: *mut c_void,
    /// Bulk bytes this process had queued, to any destination, when this one was queued.
    queued_at: u64,
}

// SAFETY: the poster of a message hands its bytes and context to the progress thread, which
// alone uses them until it calls `release` (the contract of `kvmpi_post`).
unsafe impl Send for Outgoing {}

impl Outgoing {
    fn release(self) {
        (self.release)(self.ctx)
    }
}

/// What the posting threads tell the progress thread.
enum Command {
    /// Send this message; `express` ones skip the queue of bulk messages to their rank.
    Send(Outgoing, bool),
    /// Finish the sends and receives under way, then stop (finalize).
    Stop,
}

/// A received message, for the dispatch thread: (source, tag, buffer, length).
type Delivery = (c_int, c_int, Vec<u8>, usize);

/// The channel into the progress thread, while it runs.
static POST: Mutex<Option<mpsc::Sender<Command>>> = Mutex::new(None);

/// Posts `len` bytes at `data` to world rank `dest` with `tag` and returns at once; the
/// progress thread sends them and then calls `release(ctx)` (the bytes must stay valid and
/// unchanged until then). Messages to one rank leave in the order they were posted, except
/// that `express` ones (small requests whose order with the bulk messages does not matter)
/// overtake the bulk messages still queued. Messages must be under 2 GiB. On a non-zero
/// return the message was not taken and `release` is not called.
#[no_mangle]
pub extern "C" fn kvmpi_post(dest: c_int, tag: c_int, data: *const u8, len: usize, express: c_int, release: KvmpiRelease, ctx: *mut c_void) -> c_int {
    kvmpi_post_parts(dest, tag, data, len, std::ptr::null(), 0, express, release, ctx)
}

/// As `kvmpi_post`, for a message made of `head_len` bytes at `head` followed by `body_len`
/// bytes at `body` (both kept valid and unchanged until `release(ctx)`): the receiver's
/// callback gets them as one message, and neither part is copied on the way out. `tag` must
/// be below 8192. Each part must be under 2 GiB.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn kvmpi_post_parts(
    dest: c_int,
    tag: c_int,
    head: *const u8,
    head_len: usize,
    body: *const u8,
    body_len: usize,
    express: c_int,
    release: KvmpiRelease,
    ctx: *mut c_void,
) -> c_int {
    let Some(c) = comms() else { return 1 };
    let part_ok = |p: *const u8, len: usize| len <= i32::MAX as usize && (!p.is_null() || len == 0);
    if dest < 0 || dest >= c.world.size() || !part_ok(head, head_len) || !part_ok(body, body_len) || !(0..HEAD_TAG_OFFSET).contains(&tag) {
        return 2;
    }
    let Ok(post) = POST.lock() else { return 3 };
    let Some(tx) = post.as_ref() else { return 4 };
    let out = Outgoing { dest, tag, data: head, len: head_len, body, body_len, release, ctx, queued_at: 0 };
    match tx.send(Command::Send(out, express != 0)) {
        Ok(()) => 0,
        // The progress thread has gone: the message is dropped unsent, its bytes unreleased
        // (the caller still owns them).
        Err(_) => 5,
    }
}

/// How the progress thread waits when a pass found nothing to do: a few passes back to back,
/// then waits for a posted message that double up to a cap (shorter while messages are in
/// flight: MPI moves their bytes only while a thread is inside it). Open MPI's blocking calls
/// poll in a loop instead, which on a machine with fewer cores than ranks takes the core the
/// peer needs to make progress.
struct Backoff {
    polls: u32,
    sleep_us: u64,
}

impl Backoff {
    /// Passes before the first wait.
    const SPINS: u32 = 16;
    const FIRST_SLEEP_US: u64 = 5;
    /// The longest wait with nothing in flight: the most an incoming message waits.
    const MAX_SLEEP_US: u64 = 200;
    /// The longest wait while bytes are moving (a 1 Gbit/s link carries 12 KB in 100 us,
    /// far less than the sockets buffer).
    const MAX_BUSY_SLEEP_US: u64 = 100;

    fn new() -> Backoff {
        Backoff { polls: 0, sleep_us: Self::FIRST_SLEEP_US }
    }

    /// After a pass that found nothing: how long to wait for a posted message (`None`: poll
    /// again at once).
    fn next(&mut self, busy: bool) -> Option<std::time::Duration> {
        if self.polls < Self::SPINS {
            self.polls += 1;
            std::hint::spin_loop();
            return None;
        }
        let cap = if busy { tuning().busy_sleep_us } else { Self::MAX_SLEEP_US };
        let wait = self.sleep_us.min(cap);
        self.sleep_us = (self.sleep_us * 2).min(cap);
        Some(std::time::Duration::from_micros(wait))
    }

    fn reset(&mut self) {
        *self = Backoff::new();
    }

    /// After a poll of a blocking wait (a barrier) found nothing: spins a little, then sleeps,
    /// longer each time up to `MAX_SLEEP_US`.
    fn wait(&mut self) {
        if let Some(pause) = self.next(false) {
            std::thread::sleep(pause);
        }
    }
}

/// A send under way: one request, or two for a two-part message (head, body); a finished
/// one is replaced by `MPI_REQUEST_NULL`.
struct Sending {
    requests: [ffi::MPI_Request; 2],
    out: Outgoing,
    bulk: bool,
    /// A two-part message's head with its body's length after it, held while the first
    /// request sends it (empty for a one-part message).
    _head: Vec<u8>,
}

/// `head` followed by `body_len` (the head of a two-part message as it is sent).
fn framed_head(head: &[u8], body_len: usize) -> Vec<u8> {
    let mut framed = Vec::with_capacity(head.len() + BODY_LEN_BYTES);
    framed.extend_from_slice(head);
    framed.extend_from_slice(&(body_len as u64).to_le_bytes());
    framed
}

/// A received head without its trailer, and the length of the body that follows it; `None`
/// when it is too short to have a trailer.
fn split_head(mut head: Vec<u8>) -> Option<(Vec<u8>, usize)> {
    let at = head.len().checked_sub(BODY_LEN_BYTES)?;
    let body_len = u64::from_le_bytes(head[at..].try_into().ok()?);
    head.truncate(at);
    Some((head, usize::try_from(body_len).ok()?))
}

/// A matched message being received.
struct Receiving {
    request: ffi::MPI_Request,
    tag: c_int,
    buffer: Vec<u8>,
    len: usize,
    done: bool,
}

/// One destination's queued messages.
#[derive(Default)]
struct Queue {
    express: VecDeque<Outgoing>,
    bulk: VecDeque<Outgoing>,
    /// Bulk sends under way and their bytes.
    bulk_in_flight: usize,
    bulk_bytes: usize,
}

impl Queue {
    /// Whether the next bulk message may start: its destination's window has room (or nothing
    /// is under way), and it was queued no later than `queued_by` (when given).
    fn next_bulk_may_start(&self, max_in_flight: usize, window_bytes: usize, queued_by: Option<u64>) -> bool {
        let Some(next) = self.bulk.front() else { return false };
        let fits = self.bulk_in_flight == 0 || (self.bulk_in_flight < max_in_flight && self.bulk_bytes + next.len + next.body_len <= window_bytes);
        fits && queued_by.map_or(true, |by| next.queued_at <= by)
    }
}

/// When the oldest bulk message still waiting for any destination was queued.
fn oldest_waiting(queues: &HashMap<c_int, Queue>) -> Option<u64> {
    queues.values().filter_map(|q| q.bulk.front().map(|o| o.queued_at)).min()
}

/// Bulk sends to one rank under way at once: a new one starts while fewer than this many are
/// under way and their bytes stay under `BULK_WINDOW_BYTES`, or when none is. Open MPI
/// interleaves the fragments of concurrent sends to a rank, so many at once would all finish
/// late; one at a time would leave the link idle during each rendezvous handshake.
const BULK_MAX_IN_FLIGHT: usize = 4;
const BULK_WINDOW_BYTES: usize = 2 << 20;

/// The progress thread's settings (experiments: `KVMPI_BUSY_SLEEP_US`, `KVMPI_MAX_IN_FLIGHT`,
/// `KVMPI_WINDOW_BYTES`, `KVMPI_LEAD_BYTES`).
struct Tuning {
    busy_sleep_us: u64,
    max_in_flight: usize,
    window_bytes: usize,
    /// Overrides [`kvmpi_set_bulk_lead`]'s setting.
    lead_bytes: Option<u64>,
}

fn tuning() -> &'static Tuning {
    static T: OnceLock<Tuning> = OnceLock::new();
    T.get_or_init(|| {
        let var = |name: &str, default: usize| std::env::var(name).ok().and_then(|v| v.trim().parse().ok()).unwrap_or(default);
        Tuning {
            busy_sleep_us: var("KVMPI_BUSY_SLEEP_US", Backoff::MAX_BUSY_SLEEP_US as usize) as u64,
            max_in_flight: var("KVMPI_MAX_IN_FLIGHT", BULK_MAX_IN_FLIGHT),
            window_bytes: var("KVMPI_WINDOW_BYTES", BULK_WINDOW_BYTES),
            lead_bytes: std::env::var("KVMPI_LEAD_BYTES").ok().and_then(|v| v.trim().parse().ok()),
        }
    })
}

/// Buffers kept for reuse by receives: a fresh allocation per message would fault in new
/// pages each time.
const POOL_BUFFERS: usize = 32;

fn mpi_failed(what: &str, rc: c_int) -> ! {
    eprintln!("libkvstore MPI plugin: {what} failed (code {rc}); aborting the job");
    kvmpi_abort(1);
    unreachable!()
}

/// The smallest pooled buffer that holds `len` bytes, else a new one.
fn pooled(pool: &mut Vec<Vec<u8>>, len: usize) -> Vec<u8> {
    let pick = pool.iter().enumerate().filter(|(_, b)| b.len() >= len).min_by_key(|(_, b)| b.len()).map(|(i, _)| i);
    match pick {
        Some(i) => pool.swap_remove(i),
        None => vec![0u8; len.max(1)],
    }
}

/// The progress thread: the only thread that sends and receives messages. It posts queued
/// sends (bulk ones in order, a window at a time per destination; express ones at once),
/// matches every incoming message and receives it into a pooled buffer (several at once:
/// sends and receives never wait on each other), and hands received messages to the dispatch
/// thread in match order per source.
fn progress(
    c: &'static Comms,
    me: c_int,
    placer: Option<(KvmpiPlace, Ctx)>,
    commands: mpsc::Receiver<Command>,
    deliver: mpsc::Sender<Delivery>,
    returned: mpsc::Receiver<Vec<u8>>,
) {
    let comm = c.world.as_raw();
    // SAFETY: reading MPI's predefined handles.
    let (byte, request_null) = unsafe { (ffi::RSMPI_UINT8_T, ffi::RSMPI_REQUEST_NULL) };
    let mut queues: HashMap<c_int, Queue> = HashMap::new();
    let mut sending: Vec<Sending> = Vec::new();
    let mut receiving: HashMap<c_int, VecDeque<Receiving>> = HashMap::new();
    let mut pool: Vec<Vec<u8>> = Vec::new();
    // Each pass's requests to test, the receive behind each (after the sends), what finished.
    let (mut requests, mut owners, mut indices, mut finished) = (Vec::new(), Vec::new(), Vec::<c_int>::new(), Vec::new());
    // The send and part behind each of a pass's first requests.
    let mut send_slots: Vec<(usize, usize)> = Vec::new();
    let mut stopping = false;
    let mut bulk_queued: u64 = 0;
    let mut idle = Backoff::new();
    let mut wait: Option<std::time::Duration> = None;
    loop {
        let mut worked = false;
        // Posted messages (waiting for one up to `wait` when the last pass found nothing).
        let mut first = match wait.take() {
            Some(d) => match commands.recv_timeout(d) {
                Ok(cmd) => Some(cmd),
                Err(mpsc::RecvTimeoutError::Timeout) => None,
                Err(mpsc::RecvTimeoutError::Disconnected) => Some(Command::Stop),
            },
            None => None,
        };
        loop {
            let cmd = match first.take() {
                Some(cmd) => cmd,
                None => match commands.try_recv() {
                    Ok(cmd) => cmd,
                    Err(mpsc::TryRecvError::Empty) => break,
                    Err(mpsc::TryRecvError::Disconnected) => Command::Stop,
                },
            };
            worked = true;
            match cmd {
                Command::Send(mut out, express) => {
                    let q = queues.entry(out.dest).or_default();
                    if express {
                        q.express.push_back(out)
                    } else {
                        out.queued_at = bulk_queued;
                        bulk_queued += (out.len + out.body_len) as u64;
                        q.bulk.push_back(out)
                    }
                }
                Command::Stop => {
                    stopping = true;
                    break;
                }
            }
        }
        // Start the sends that may start.
        let lead = tuning().lead_bytes.unwrap_or_else(|| BULK_LEAD.load(Ordering::Relaxed));
        let oldest_waiting = if lead > 0 { oldest_waiting(&queues) } else { None };
        for q in queues.values_mut() {
            let mut start = |out: Outgoing, bulk: bool| {
                let isend = |data: *const u8, len: usize, tag: c_int| {
                    let mut request = request_null;
                    // SAFETY: `data` holds `len` bytes until `release` (kvmpi_post_parts's
                    // contract), which is called only after this request completes.
                    let rc = unsafe { ffi::MPI_Isend(data as *const c_void, len as c_int, byte, out.dest, tag, comm, &mut request) };
                    if rc != 0 {
                        mpi_failed("MPI_Isend", rc);
                    }
                    request
                };
                // A two-part message's parts leave back to back: its receiver takes the next
                // message from this process after the head as its body.
                let (requests, head) = if out.body_len == 0 {
                    ([isend(out.data, out.len, out.tag), request_null], Vec::new())
                } else {
                    let head: &[u8] = if out.len == 0 {
                        &[]
                    } else {
                        // SAFETY: a posted message's head holds `len` readable bytes until its
                        // release (kvmpi_post_parts's contract), which comes after this send.
                        unsafe { std::slice::from_raw_parts(out.data, out.len) }
                    };
                    // Its bytes stay where they are while `sending` holds it (moving a Vec
                    // moves no bytes), until both requests complete.
                    let head = framed_head(head, out.body_len);
                    ([isend(head.as_ptr(), head.len(), out.tag + HEAD_TAG_OFFSET), isend(out.body, out.body_len, out.tag)], head)
                };
                sending.push(Sending { requests, out, bulk, _head: head });
            };
            while let Some(out) = q.express.pop_front() {
                start(out, false);
                worked = true;
            }
            let t = tuning();
            while q.next_bulk_may_start(t.max_in_flight, t.window_bytes, oldest_waiting.map(|w| w.saturating_add(lead))) {
                let out = q.bulk.pop_front().expect("front checked");
                q.bulk_in_flight += 1;
                q.bulk_bytes += out.len + out.body_len;
                start(out, true);
                worked = true;
            }
        }
        // Buffers the dispatch thread is done with.
        while let Ok(b) = returned.try_recv() {
            pool.push(b);
        }
        if pool.len() > POOL_BUFFERS {
            pool.sort_by_key(|b| std::cmp::Reverse(b.len()));
            pool.truncate(POOL_BUFFERS);
        }
        // Match incoming messages and start receiving them.
        if !stopping {
            for _ in 0..64 {
                let mut flag: c_int = 0;
                // SAFETY: a zeroed status is a valid out-parameter; the message handle is
                // written by MPI.
                let mut message = unsafe { ffi::RSMPI_MESSAGE_NULL };
                let mut status: ffi::MPI_Status = unsafe { std::mem::zeroed() };
                // SAFETY: valid out-pointers, a valid communicator.
                let rc = unsafe { ffi::MPI_Improbe(ffi::RSMPI_ANY_SOURCE, ffi::RSMPI_ANY_TAG, comm, &mut flag, &mut message, &mut status) };
                if rc != 0 {
                    mpi_failed("MPI_Improbe", rc);
                }
                if flag == 0 {
                    break;
                }
                worked = true;
                let mut count: c_int = 0;
                // SAFETY: the status MPI_Improbe filled.
                unsafe { ffi::MPI_Get_count(&status, byte, &mut count) };
                let len = count.max(0) as usize;
                let (source, tag) = (status.MPI_SOURCE, status.MPI_TAG);
                if (HEAD_TAG_OFFSET..2 * HEAD_TAG_OFFSET).contains(&tag) {
                    // The head of a two-part message: small, and here whole once matched.
                    let mut head = vec![0u8; len];
                    // SAFETY: `head` holds `len` bytes; the message was matched above.
                    let rc = unsafe { ffi::MPI_Mrecv(head.as_mut_ptr() as *mut c_void, count, byte, &mut message, ffi::RSMPI_STATUS_IGNORE) };
                    if rc != 0 {
                        mpi_failed("MPI_Mrecv", rc);
                    }
                    let Some((head, body_len)) = split_head(head) else {
                        mpi_failed("receiving a two-part message (its head carries no body length)", tag);
                    };
                    let Ok(body_count) = c_int::try_from(body_len) else {
                        mpi_failed("receiving a two-part message (its body is 2 GiB or more)", tag);
                    };
                    // Its body, the next message from `source` with the body's tag (the sender
                    // sends the two back to back, and every earlier message of `source` has
                    // been matched before its head), is received where the placement callback
                    // says, else after its head in one buffer, as one message. Its receive is
                    // posted now, before the next probe, so no probe ever matches a body.
                    let body_tag = tag - HEAD_TAG_OFFSET;
                    let target = match &placer {
                        Some((place, ctx)) => place(ctx.0, source, body_tag, head.as_ptr(), head.len(), body_len),
                        None => std::ptr::null_mut(),
                    };
                    let mut request = request_null;
                    let entry = if !target.is_null() {
                        // SAFETY: the placement callback promised `body_len` writable bytes at
                        // `target` until this message is delivered, after the request completes.
                        let rc = unsafe { ffi::MPI_Irecv(target as *mut c_void, body_count, byte, source, body_tag, comm, &mut request) };
                        if rc != 0 {
                            mpi_failed("MPI_Irecv", rc);
                        }
                        let len = head.len();
                        Receiving { request, tag: body_tag + PLACED_TAG_OFFSET, buffer: head, len, done: false }
                    } else {
                        let at = head.len();
                        let mut buffer = pooled(&mut pool, at + body_len);
                        buffer[..at].copy_from_slice(&head);
                        // SAFETY: `buffer` holds at least `at + body_len` bytes and is kept (in
                        // `receiving`) until the request completes.
                        let rc = unsafe { ffi::MPI_Irecv(buffer[at..].as_mut_ptr() as *mut c_void, body_count, byte, source, body_tag, comm, &mut request) };
                        if rc != 0 {
                            mpi_failed("MPI_Irecv", rc);
                        }
                        Receiving { request, tag: body_tag, buffer, len: at + body_len, done: false }
                    };
                    receiving.entry(source).or_default().push_back(entry);
                    continue;
                }
                // A one-part message, into a pooled buffer.
                let mut buffer = pooled(&mut pool, len);
                let mut request = request_null;
                // SAFETY: `buffer` holds at least `len` bytes and is kept (in `receiving`)
                // until the request completes.
                let rc = unsafe { ffi::MPI_Imrecv(buffer.as_mut_ptr() as *mut c_void, count, byte, &mut message, &mut request) };
                if rc != 0 {
                    mpi_failed("MPI_Imrecv", rc);
                }
                receiving.entry(source).or_default().push_back(Receiving { request, tag, buffer, len, done: false });
            }
        }
        // Finished sends and receives, found by one test of every request: a test that finds
        // its request unfinished runs Open MPI's progress engine (a poll of every socket), so
        // testing them one at a time cost a system call per request and pass.
        requests.clear();
        owners.clear();
        send_slots.clear();
        for (i, s) in sending.iter().enumerate() {
            for (slot, &r) in s.requests.iter().enumerate().filter(|(_, &r)| r != request_null) {
                requests.push(r);
                send_slots.push((i, slot));
            }
        }
        let sends = requests.len();
        for (&source, list) in receiving.iter() {
            for (i, r) in list.iter().enumerate().filter(|(_, r)| !r.done) {
                requests.push(r.request);
                owners.push((source, i));
            }
        }
        if !requests.is_empty() {
            indices.resize(requests.len(), 0);
            let mut count: c_int = 0;
            // SAFETY: `requests` holds live requests of this thread (copies: MPI frees the
            // completed ones, which are then dropped from `sending` or marked done below and
            // never tested again); `indices` has room for every request; statuses ignored.
            let rc = unsafe {
                ffi::MPI_Testsome(requests.len() as c_int, requests.as_mut_ptr(), &mut count, indices.as_mut_ptr(), ffi::RSMPI_STATUSES_IGNORE)
            };
            if rc != 0 {
                mpi_failed("MPI_Testsome", rc);
            }
            finished.clear();
            for &i in &indices[..count.max(0) as usize] {
                let i = i as usize;
                match i.checked_sub(sends) {
                    None => {
                        // A send is finished once each of its parts is.
                        let (at, slot) = send_slots[i];
                        let s = &mut sending[at];
                        s.requests[slot] = request_null;
                        if s.requests.iter().all(|&r| r == request_null) {
                            finished.push(at);
                        }
                    }
                    Some(r) => {
                        let (source, at) = owners[r];
                        if let Some(r) = receiving.get_mut(&source).and_then(|l| l.get_mut(at)) {
                            r.done = true;
                        }
                    }
                }
            }
            // Highest first: each swap_remove then moves an element that stays.
            finished.sort_unstable_by(|a, b| b.cmp(a));
            for &i in &finished {
                worked = true;
                // Finished sends: release their bytes, open their destination's window.
                let done = sending.swap_remove(i);
                if done.bulk {
                    if let Some(q) = queues.get_mut(&done.out.dest) {
                        q.bulk_in_flight -= 1;
                        q.bulk_bytes -= done.out.len + done.out.body_len;
                    }
                }
                done.out.release();
            }
        }
        // Finished receives, in match order per source.
        for (&source, list) in receiving.iter_mut() {
            while list.front().is_some_and(|r| r.done) {
                let r = list.pop_front().expect("front checked");
                worked = true;
                if r.tag == STOP_TAG && source == me {
                    pool.push(r.buffer);
                    continue;
                }
                // A dispatch thread that has gone (finalize) drops the message.
                let _ = deliver.send((source, r.tag, r.buffer, r.len));
            }
        }
        let in_flight = !sending.is_empty() || receiving.values().any(|l| !l.is_empty());
        if stopping && !in_flight && queues.values().all(|q| q.express.is_empty() && q.bulk.is_empty()) {
            return;
        }
        if worked {
            idle.reset();
        } else {
            wait = idle.next(in_flight);
        }
    }
}

/// A pointer the dispatch and progress threads pass back to the callbacks untouched.
struct Ctx(*mut c_void);
// SAFETY: the caller of `kvmpi_start_receiver` promises that `ctx` may be used from the
// dispatch and progress threads; this library never dereferences it.
unsafe impl Send for Ctx {}

/// Starts the progress thread (every send and receive) and the dispatch thread: every
/// message received (any source, any tag but the stop tag) is handed to
/// `callback(ctx, source, tag, data, len)` there, in order per source. With `place`, the body
/// of a two-part message goes where `place(ctx, ...)` answers for its head, and its delivery
/// is the head alone with the tag plus `PLACED_TAG_OFFSET`.
#[no_mangle]
pub extern "C" fn kvmpi_start_receiver(callback: KvmpiReceive, place: Option<KvmpiPlace>, ctx: *mut c_void) -> c_int {
    let Some(c) = comms() else { return 1 };
    let Ok(mut threads) = THREADS.lock() else { return 3 };
    if threads.receiver.is_some() {
        return 1;
    }
    let Ok(mut post) = POST.lock() else { return 3 };
    let placer = place.map(|p| (p, Ctx(ctx)));
    let ctx = Ctx(ctx);
    let me = c.world.rank();
    let (command_tx, command_rx) = mpsc::channel::<Command>();
    let (deliver_tx, deliver_rx) = mpsc::channel::<Delivery>();
    let (return_tx, return_rx) = mpsc::channel::<Vec<u8>>();
    let dispatch = std::thread::Builder::new().name("kvstore-mpi-recv".into()).spawn(move || {
        let ctx = ctx;
        while let Ok((source, tag, buffer, len)) = deliver_rx.recv() {
            callback(ctx.0, source, tag, buffer.as_ptr(), len);
            let _ = return_tx.send(buffer);
        }
    });
    let Ok(dispatch) = dispatch else { return 2 };
    let progress = std::thread::Builder::new().name("kvstore-mpi-progress".into()).spawn(move || progress(c, me, placer, command_rx, deliver_tx, return_rx));
    match progress {
        Ok(h) => {
            threads.receiver = Some(h);
            threads.dispatch = Some(dispatch);
            *post = Some(command_tx);
            0
        }
        Err(_) => 2,
    }
}

/// A barrier: `group` 0 over every process, 1 over the processes of this one's colour.
#[no_mangle]
pub extern "C" fn kvmpi_barrier(group: c_int) -> c_int {
    let Some(c) = comms() else { return 1 };
    // A non-blocking barrier, polled: Open MPI's blocking one spins (taking the core a peer
    // may need), and a peer that never arrives is for the caller's monitor to judge.
    let mut request = if group == 0 { c.world.immediate_barrier() } else { c.group.immediate_barrier() };
    let mut idle = Backoff::new();
    loop {
        match request.test() {
            Ok(_) => return 0,
            Err(pending) => request = pending,
        }
        idle.wait();
    }
}

/// Seconds `kvmpi_abort` gives `MPI_Abort` before this process exits on its own: with a peer
/// or its host unreachable, Open MPI may not manage to tell the others (mpirun's daemons then
/// end them when they lose contact), but this process must not stay behind.
const ABORT_GRACE_S: u64 = 3;

/// Aborts every process of the job with `code`. Never returns: if `MPI_Abort` has not ended
/// this process within `ABORT_GRACE_S` seconds, it exits with `code`.
#[no_mangle]
pub extern "C" fn kvmpi_abort(code: c_int) {
    let _ = std::thread::Builder::new().name("kvstore-mpi-abort".into()).spawn(move || {
        std::thread::sleep(Duration::from_secs(ABORT_GRACE_S));
        // SAFETY: `_exit` ends the process at once; no Rust state is touched after it.
        unsafe { libc_exit(code) };
    });
    if let Some(c) = comms() {
        c.world.abort(code);
    }
    std::process::exit(code);
}

/// Ends this process where it hears from no other rank of the job (its host is cut off):
/// `MPI_Abort` could not reach mpirun, and the host's Open MPI daemon for the job, whose
/// report of this process's end could not reach mpirun either, would wait for it as long as
/// TCP retransmits (many minutes, keepalives do not apply to unacknowledged data). So the
/// daemon is killed (the nearest ancestor process named `orted`, if any) and this process
/// exits with `code` at once. Never returns.
#[no_mangle]
pub extern "C" fn kvmpi_abort_isolated(code: c_int) {
    if let Some(daemon) = daemon_ancestor() {
        // SAFETY: a plain system call on a process id read from /proc.
        unsafe { libc_kill(daemon, SIGKILL) };
    }
    // SAFETY: `_exit` ends the process at once; no Rust state is touched after it.
    unsafe { libc_exit(code) };
}

/// The process id of the nearest ancestor named `orted` (Open MPI's daemon), within a few
/// generations.
fn daemon_ancestor() -> Option<c_int> {
    let parent_of = |pid: &str| -> Option<String> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // `pid (comm) state ppid ...`: the command may hold spaces and parentheses.
        let after = &stat[stat.rfind(')')? + 1..];
        after.split_whitespace().nth(1).map(str::to_string)
    };
    let mut pid = parent_of("self")?;
    for _ in 0..8 {
        if pid == "0" || pid == "1" {
            return None;
        }
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
        if comm.trim() == "orted" {
            return pid.parse().ok();
        }
        pid = parent_of(&pid)?;
    }
    None
}

const SIGKILL: c_int = 9;

extern "C" {
    /// libc's `_exit`: ends the process without running exit handlers (which could wait on
    /// the MPI library that is stuck).
    #[link_name = "_exit"]
    fn libc_exit(code: c_int) -> !;
    /// libc's `kill`.
    #[link_name = "kill"]
    fn libc_kill(pid: c_int, signal: c_int) -> c_int;
}

/// Writes this process's MPI processor name (its host name), NUL-terminated, into `out` (`len`
/// bytes), for every process: `out` holds `n` (the world size) entries of `len` bytes, in
/// world-rank order. Names longer than `len - 1` bytes are cut.
///
/// # Safety
/// `out` is NULL or valid for writing `n * len` bytes.
#[no_mangle]
pub unsafe extern "C" fn kvmpi_processor_names(out: *mut u8, len: usize, n: usize) -> c_int {
    let Some(c) = comms() else { return 1 };
    if out.is_null() || len < 2 || n != c.world.size() as usize {
        return 2;
    }
    let name = mpi::environment::processor_name().unwrap_or_else(|_| "?".to_string());
    let mut mine = vec![0u8; len];
    let cut = name.len().min(len - 1);
    mine[..cut].copy_from_slice(&name.as_bytes()[..cut]);
    // SAFETY: `out` points at `n * len` bytes (the caller's contract, `n` checked above).
    let all = unsafe { std::slice::from_raw_parts_mut(out, n * len) };
    c.world.all_gather_into(&mine[..], all);
    0
}

/// When each process was last heard from on the heartbeat communicator, in milliseconds since
/// `BEAT_EPOCH` (0: not yet; its silence then counts from the heartbeats' start).
static LAST_BEAT_MS: OnceLock<Vec<AtomicU64>> = OnceLock::new();
static BEAT_EPOCH: OnceLock<Instant> = OnceLock::new();
/// The one byte every heartbeat carries (a `'static` buffer: a heartbeat's send is never waited for).
static BEAT_BYTE: [u8; 1] = [0];

fn since_epoch_ms() -> u64 {
    BEAT_EPOCH.get().map_or(0, |e| e.elapsed().as_millis() as u64)
}

/// Starts the heartbeat thread: every `interval_ms` it sends one byte to every other process
/// on the heartbeat communicator (skipping a process whose previous heartbeat is not yet
/// delivered: a stopped peer is not flooded), and it records every heartbeat received. A busy
/// process keeps beating (the thread needs no other thread of the process); a stopped,
/// frozen or cut-off one falls silent. See `kvmpi_silence_ms`.
#[no_mangle]
pub extern "C" fn kvmpi_start_heartbeat(interval_ms: u64) -> c_int {
    let Some(c) = comms() else { return 1 };
    let Ok(mut threads) = THREADS.lock() else { return 3 };
    if threads.heartbeat.is_some() {
        return 1;
    }
    let size = c.world.size() as usize;
    let me = c.world.rank() as usize;
    let _ = BEAT_EPOCH.set(Instant::now());
    let _ = LAST_BEAT_MS.set((0..size).map(|_| AtomicU64::new(0)).collect());
    let stop = Arc::new(AtomicBool::new(false));
    let stopping = Arc::clone(&stop);
    let interval = Duration::from_millis(interval_ms.max(10));
    // How often incoming heartbeats are read: a few times per interval, at most every 50 ms.
    let tick = (interval / 4).clamp(Duration::from_millis(5), Duration::from_millis(50));
    let spawned = std::thread::Builder::new().name("kvstore-mpi-beat".into()).spawn(move || {
        let last = LAST_BEAT_MS.get().expect("set above");
        let mut sends: Vec<Option<mpi::request::Request<'static, [u8]>>> = (0..size).map(|_| None).collect();
        let mut buf = [0u8; 1];
        let mut next_send = Instant::now();
        while !stopping.load(Ordering::Relaxed) {
            if Instant::now() >= next_send {
                next_send = Instant::now() + interval;
                for (peer, slot) in sends.iter_mut().enumerate() {
                    if peer == me {
                        continue;
                    }
                    if let Some(r) = slot.take() {
                        if let Err(pending) = r.test() {
                            *slot = Some(pending);
                            continue;
                        }
                    }
                    *slot = Some(c.beat.process_at_rank(peer as i32).immediate_send(mpi::request::StaticScope, &BEAT_BYTE[..]));
                }
            }
            while let Some((message, status)) = c.beat.any_process().immediate_matched_probe() {
                let _ = message.matched_receive_into(&mut buf[..]);
                if let Some(slot) = last.get(status.source_rank() as usize) {
                    slot.store(since_epoch_ms().max(1), Ordering::Relaxed);
                }
            }
            std::thread::sleep(tick);
        }
        // Every peer still runs its heartbeat thread until its own finalize, so the last
        // heartbeats are delivered at once; any still pending after a second are left to MPI.
        let deadline = Instant::now() + Duration::from_secs(1);
        for slot in sends.iter_mut() {
            let Some(mut r) = slot.take() else { continue };
            loop {
                match r.test() {
                    Ok(_) => break,
                    Err(pending) if Instant::now() < deadline => {
                        r = pending;
                        // Drain incoming heartbeats, which may be what the peer waits on.
                        while let Some((message, _)) = c.beat.any_process().immediate_matched_probe() {
                            let _ = message.matched_receive_into(&mut buf[..]);
                        }
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    Err(pending) => {
                        // A `Request` panics when dropped incomplete; MPI_Finalize reclaims it.
                        std::mem::forget(pending);
                        break;
                    }
                }
            }
        }
    });
    match spawned {
        Ok(h) => {
            threads.heartbeat = Some((stop, h));
            0
        }
        Err(_) => 2,
    }
}

/// Milliseconds since anything was heard from world rank `rank` on the heartbeat
/// communicator (since the heartbeats started, if nothing yet); -1 without heartbeats or for
/// a bad rank.
#[no_mangle]
pub extern "C" fn kvmpi_silence_ms(rank: c_int) -> i64 {
    let (Some(last), Ok(rank)) = (LAST_BEAT_MS.get(), usize::try_from(rank)) else { return -1 };
    let Some(slot) = last.get(rank) else { return -1 };
    since_epoch_ms().saturating_sub(slot.load(Ordering::Relaxed)) as i64
}

/// Stops the receiver thread and finalises MPI on the thread that initialised it. Callers
/// must have finished every send and barrier.
#[no_mangle]
pub extern "C" fn kvmpi_finalize() -> c_int {
    let Some(c) = comms() else { return 1 };
    let Ok(mut threads) = THREADS.lock() else { return 3 };
    if let Some((stop, beat)) = threads.heartbeat.take() {
        stop.store(true, Ordering::Relaxed);
        let _ = beat.join();
    }
    // The progress thread finishes the sends and receives under way, then the dispatch
    // thread the messages handed to it.
    let post = POST.lock().ok().and_then(|mut p| p.take());
    if let Some(post) = post {
        let _ = post.send(Command::Stop);
    }
    if let Some(receiver) = threads.receiver.take() {
        let _ = receiver.join();
    }
    if let Some(dispatch) = threads.dispatch.take() {
        let _ = dispatch.join();
    }
    let _ = c;
    if let Some(fin) = threads.finalize.take() {
        let _ = fin.send(());
    }
    if let Some(owner) = threads.owner.take() {
        let _ = owner.join();
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_carries_its_body_length_and_comes_back_unchanged() {
        let head = b"a head of some bytes".to_vec();
        for body_len in [1usize, 4096, (1 << 20) + 7, i32::MAX as usize] {
            let framed = framed_head(&head, body_len);
            assert_eq!(framed.len(), head.len() + BODY_LEN_BYTES);
            assert_eq!(split_head(framed), Some((head.clone(), body_len)));
        }
        let empty = framed_head(&[], 9);
        assert_eq!(split_head(empty), Some((Vec::new(), 9)));
    }

    extern "C" fn release_nothing(_: *mut c_void) {}

    fn queued(dest: c_int, len: usize, queued_at: u64) -> Outgoing {
        Outgoing { dest, tag: 0, data: std::ptr::null(), len, body: std::ptr::null(), body_len: 0, release: release_nothing, ctx: std::ptr::null_mut(), queued_at }
    }

    #[test]
    fn a_bulk_message_waits_for_its_window_and_for_other_destinations_within_the_lead() {
        const MIB: usize = 1 << 20;
        let mut queues: HashMap<c_int, Queue> = HashMap::new();
        // Destination 1 holds 4 MiB queued first, destination 2 the next 4 MiB.
        for i in 0..4u64 {
            queues.entry(1).or_default().bulk.push_back(queued(1, MIB, i * MIB as u64));
            queues.entry(2).or_default().bulk.push_back(queued(2, MIB, (4 + i) * MIB as u64));
        }
        assert_eq!(oldest_waiting(&queues), Some(0));
        let lead = MIB as u64;
        let by = oldest_waiting(&queues).map(|w| w + lead);
        assert!(queues[&1].next_bulk_may_start(4, 2 * MIB, by), "the oldest message may always start");
        assert!(!queues[&2].next_bulk_may_start(4, 2 * MIB, by), "4 MiB ahead of destination 1, with a lead of 1 MiB");
        assert!(queues[&2].next_bulk_may_start(4, 2 * MIB, None), "without a lead only the window counts");
        // Destination 1 starts its messages: two fill its 2 MiB window; once its waiting
        // front was queued at 3 MiB, destination 2's first (at 4 MiB) is within the lead.
        for started in 1..=3u64 {
            let q = queues.get_mut(&1).unwrap();
            if started == 3 {
                // The first send finishes and opens the window.
                q.bulk_in_flight -= 1;
                q.bulk_bytes -= MIB;
            }
            let out = q.bulk.pop_front().unwrap();
            q.bulk_in_flight += 1;
            q.bulk_bytes += out.len;
            let by = oldest_waiting(&queues).map(|w| w + lead);
            assert_eq!(queues[&2].next_bulk_may_start(4, 2 * MIB, by), started == 3, "after {started} started");
            if started == 2 {
                assert!(!queues[&1].next_bulk_may_start(4, 2 * MIB, by), "destination 1's window is full");
            }
        }
        // With destination 1's queue empty, destination 2 is the oldest waiting.
        queues.get_mut(&1).unwrap().bulk.clear();
        assert_eq!(oldest_waiting(&queues), Some(4 * MIB as u64));
        assert!(!Queue::default().next_bulk_may_start(4, 2 * MIB, None), "nothing queued");
    }

    #[test]
    fn a_head_too_short_for_a_body_length_is_refused() {
        assert_eq!(split_head(Vec::new()), None);
        assert_eq!(split_head(vec![1u8; BODY_LEN_BYTES - 1]), None);
    }
}
