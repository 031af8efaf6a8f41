//! libkvstore's MPI transport: a small C ABI over Open MPI, loaded by libkvstore at the first
//! distributed store so that a program that never makes one never needs MPI.
//!
//! What it offers: MPI initialised with `MPI_THREAD_MULTIPLE` on a thread this library owns
//! (which also finalises it), a private duplicate of the world communicator for messages and
//! all-node barriers, a communicator per role colour for group barriers, blocking byte sends
//! with a tag, a receiver thread handing every message to a callback, an all-gather of one
//! int and of the processor names, heartbeats on a communicator of their own (so that a peer
//! that is busy, or whose data messages wait behind a blocked handler, still shows it is
//! alive, and one that is stopped or cut off shows silence), and abort. Barriers and sends
//! poll with a sleeping backoff: they never spin, and a thread of the caller (libkvstore's
//! monitor) can end the job with `kvmpi_abort` while they wait. Every function returns 0 on
//! success and a non-zero code otherwise.

use mpi::point_to_point::{Destination, Source};
use mpi::datatype::Equivalence;
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
pub const KVMPI_ABI_VERSION: c_int = 2;

/// The tag of the message a process sends itself to stop its receiver thread.
const STOP_TAG: i32 = 32000;

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
    receiver: Option<JoinHandle<()>>,
    /// The heartbeat thread and its stop flag.
    heartbeat: Option<(Arc<AtomicBool>, JoinHandle<()>)>,
}

static THREADS: Mutex<Threads> = Mutex::new(Threads { finalize: None, owner: None, receiver: None, heartbeat: None });

/// A message callback: `(ctx, source world rank, tag, data, len)`; `data` is valid during the
/// call only.
pub type KvmpiReceive = extern "C" fn(*mut c_void, c_int, c_int, *const u8, usize);

fn comms() -> Option<&'static Comms> {
    COMMS.get()
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
#[no_mangle]
pub extern "C" fn kvmpi_init(color: c_int, rank: *mut c_int, size: *mut c_int) -> c_int {
    let mut threads = match THREADS.lock() {
        Ok(t) => t,
        Err(_) => return 3,
    };
    if COMMS.get().is_some() || threads.owner.is_some() {
        return 1;
    }
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

/// Gathers one int from every process into `out` (world-size entries, in world-rank order).
#[no_mangle]
pub extern "C" fn kvmpi_allgather_int(value: c_int, out: *mut c_int, n: usize) -> c_int {
    let Some(c) = comms() else { return 1 };
    if out.is_null() || n != c.world.size() as usize {
        return 2;
    }
    // SAFETY: `out` points at `n` ints (checked non-null, and `n` is the world size as asked).
    let out = unsafe { std::slice::from_raw_parts_mut(out, n) };
    c.world.all_gather_into(&value, out);
    0
}

/// Sends `len` bytes at `data` to world rank `dest` with `tag`; returns once the buffer may
/// be reused. Messages must be under 2 GiB.
#[no_mangle]
pub extern "C" fn kvmpi_send(dest: c_int, tag: c_int, data: *const u8, len: usize) -> c_int {
    let Some(c) = comms() else { return 1 };
    if dest < 0 || dest >= c.world.size() || len > i32::MAX as usize || (data.is_null() && len > 0) {
        return 2;
    }
    let bytes: &[u8] = if len == 0 {
        &[]
    } else {
        // SAFETY: `data` points at `len` readable bytes for the duration of the call.
        unsafe { std::slice::from_raw_parts(data, len) }
    };
    mpi::request::scope(|scope| {
        let mut request = c.world.process_at_rank(dest).immediate_send_with_tag(scope, bytes, tag);
        let mut idle = Backoff::new();
        loop {
            match request.test() {
                Ok(_) => break,
                Err(pending) => request = pending,
            }
            idle.wait();
        }
    });
    0
}

/// How a thread waits for MPI without spinning: a few polls back to back, then sleeps that
/// double up to a cap. Open MPI's blocking calls poll in a loop (yielding at most), which on
/// a machine with fewer cores than ranks takes the core the peer needs to make progress.
struct Backoff {
    polls: u32,
    sleep_us: u64,
}

impl Backoff {
    /// Polls before the first sleep.
    const SPINS: u32 = 16;
    const FIRST_SLEEP_US: u64 = 5;
    /// The longest sleep: the most a message waits for a thread that has gone idle.
    const MAX_SLEEP_US: u64 = 200;

    fn new() -> Backoff {
        Backoff { polls: 0, sleep_us: Self::FIRST_SLEEP_US }
    }

    /// Called after a poll found nothing.
    fn wait(&mut self) {
        if self.polls < Self::SPINS {
            self.polls += 1;
            std::hint::spin_loop();
            return;
        }
        std::thread::sleep(std::time::Duration::from_micros(self.sleep_us));
        self.sleep_us = (self.sleep_us * 2).min(Self::MAX_SLEEP_US);
    }

    /// Called when a poll found work.
    fn reset(&mut self) {
        *self = Backoff::new();
    }
}

/// A pointer the receiver thread passes back to the callback untouched.
struct Ctx(*mut c_void);
// SAFETY: the caller of `kvmpi_start_receiver` promises that `ctx` may be used from the
// receiver thread; this library never dereferences it.
unsafe impl Send for Ctx {}

/// Starts the receiver thread: every message (any source, any tag but the stop tag) is handed
/// to `callback(ctx, source, tag, data, len)` in arrival order.
#[no_mangle]
pub extern "C" fn kvmpi_start_receiver(callback: KvmpiReceive, ctx: *mut c_void) -> c_int {
    let Some(c) = comms() else { return 1 };
    let Ok(mut threads) = THREADS.lock() else { return 3 };
    if threads.receiver.is_some() {
        return 1;
    }
    let ctx = Ctx(ctx);
    let me = c.world.rank();
    let spawned = std::thread::Builder::new().name("kvstore-mpi-recv".into()).spawn(move || {
        let ctx = ctx;
        // One buffer for every message, grown to the largest: a fresh allocation per message
        // would fault in new pages each time.
        let mut buffer: Vec<u8> = Vec::new();
        let mut idle = Backoff::new();
        loop {
            let Some((message, status)) = c.world.any_process().immediate_matched_probe() else {
                idle.wait();
                continue;
            };
            idle.reset();
            let len = usize::try_from(status.count(u8::equivalent_datatype())).unwrap_or(0);
            if buffer.len() < len {
                buffer.resize(len, 0);
            }
            let status = message.matched_receive_into(&mut buffer[..len]);
            if status.tag() == STOP_TAG && status.source_rank() == me {
                return;
            }
            callback(ctx.0, status.source_rank(), status.tag(), buffer.as_ptr(), len);
        }
    });
    match spawned {
        Ok(h) => {
            threads.receiver = Some(h);
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
const ABORT_GRACE_S: u64 = 10;

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

extern "C" {
    /// libc's `_exit`: ends the process without running exit handlers (which could wait on
    /// the MPI library that is stuck).
    #[link_name = "_exit"]
    fn libc_exit(code: c_int) -> !;
}

/// Writes this process's MPI processor name (its host name), NUL-terminated, into `out` (`len`
/// bytes), for every process: `out` holds `n` (the world size) entries of `len` bytes, in
/// world-rank order. Names longer than `len - 1` bytes are cut.
#[no_mangle]
pub extern "C" fn kvmpi_processor_names(out: *mut u8, len: usize, n: usize) -> c_int {
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
    if let Some(receiver) = threads.receiver.take() {
        c.world.this_process().send_with_tag(&[0u8][..], STOP_TAG);
        let _ = receiver.join();
    }
    if let Some(fin) = threads.finalize.take() {
        let _ = fin.send(());
    }
    if let Some(owner) = threads.owner.take() {
        let _ = owner.join();
    }
    0
}
