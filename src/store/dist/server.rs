//! A server of a distributed store, as MXNet 1.9's `KVStoreDistServer`: it holds one part of
//! each of its keys as a 1-D array; the first push of a key is its init; in sync mode it sums
//! one push per worker that has not joined (in worker-rank order, `round`) and then updates
//! once and answers every push; in async mode it applies each push at once. Server 0 also
//! coordinates the worker barriers (`members`). Messages are handled on the MPI receiver thread;
//! updater and controller calls run on the `RunServer` thread (Python needs its main thread).
//! The receiver waits for controller calls and row_sparse updates, as MXNet's
//! `Executor::Exec`; a dense round is updated and answered there while the receiver goes on
//! with other keys' messages (`applying`).

use super::applying::Applying;
use super::byte_kernels;
use super::chunks::{Answering, PartRound};
use super::command::{decode_compression, Command};
use super::liveness::{Owe, What};
use super::members::{Members, Released};
use super::round::{advance, sum_order, Folds, Request, Round, SumOrder};
use super::role::Role;
use super::transport::{Body, Node, PlacedAt, Placement};
use super::wire::{self, Msg};
use super::Controller;
use crate::backend::GradientCompression;
use crate::engine::engine;
use crate::error::Result;
use crate::ndarray::{DType, NDArray};
use crate::store::{IntUpdater, STORE_CONTEXT};
use crossbeam::channel::{unbounded, Receiver, Sender};
use parking_lot::{Mutex, MutexGuard, RwLock};
use std::borrow::Cow;
use std::collections::{HashMap, VecDeque};
use std::ffi::CString;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Work for the `RunServer` thread.
enum Job {
    Update { key: i32, recv: NDArray, stored: NDArray, done: Sender<()> },
    /// A dense key's round to update and answer there, not waited for (see `Applying`).
    Apply(Applied),
    Control { id: i32, body: CString, done: Sender<()> },
    Stop,
}

/// A dense key's completed round (or async push), to update with `recv` and answer.
struct Applied {
    key: i32,
    recv: NDArray,
    stored: NDArray,
    /// With multi-precision, the key's-dtype copy that pulls read (and its dtype).
    stored_dtype: Option<(NDArray, DType)>,
    requests: Vec<Request>,
}

/// An answer carrying a range of a value: to rank `dest`, its message `head` (a `Reply` or
/// `ReplyPart` without data), then bytes `range` of the value.
struct ValueAnswer {
    dest: usize,
    head: Vec<u8>,
    range: std::ops::Range<usize>,
}

/// A server's part of a key.
struct Entry {
    dtype: DType,
    /// The value the updater sees: float32 with multi-precision, else the key's dtype.
    stored: NDArray,
    /// With multi-precision, the key's-dtype copy that pulls read.
    stored_dtype: Option<NDArray>,
    /// The sum of this round's pushes (sync) or the push being applied (async).
    merged: Option<NDArray>,
    /// The sync round in progress, chunk by chunk (pushed values in the working dtype).
    round: PartRound,
}

/// What placing a `PullAfter` asks for (`ServerCore::defer_pull`).
enum Placed {
    /// Answer it now, whole.
    Now,
    /// Answered as its round goes on; the chunks of that round completed already, to send
    /// it now.
    Deferred(Option<ChunkAnswers>),
}

/// Completed chunks of a sync round's new value and who gets each (`advance_dense`).
struct ChunkAnswers {
    /// The array holding the new value (the round's sum).
    value: NDArray,
    /// Each chunk's elements `(first, count)` and its requests.
    chunks: Vec<((usize, usize), Vec<Request>)>,
}

/// A server's part of a row_sparse key.
struct RspEntry {
    dtype: DType,
    /// Rows in this server's part of the key.
    part_rows: usize,
    row_len: usize,
    /// The value the updater sees (row_sparse, float32 with multi-precision): as MXNet, the
    /// rows of the init push, numbered from 0.
    stored: NDArray,
    /// What pulls read, in the key's dtype: MXNet answers a pull of row `r` from the stored
    /// array's value buffer at `r * row size`, which holds the stored rows packed from the
    /// start. After an update that leaves fewer rows (an assignment without an updater), the
    /// rows past them keep their earlier values; this buffer reproduces that.
    memory: Vec<u8>,
    /// The round's sum (sync) or the push being applied (async): row ids and rows, in the
    /// dtype the server works in.
    merged: (Vec<i64>, Vec<u8>),
    /// The sync round in progress (pushed row ids and rows in the working dtype).
    round: Round<(Vec<i64>, Vec<u8>)>,
}

struct State {
    members: Members,
    /// Pushes received per (key, source rank), init pushes aside: what `PullAfter` names.
    push_counts: HashMap<(i32, usize), u64>,
    /// `PullAfter`s whose push has not arrived yet, per key: (source, push number, req,
    /// relay).
    waiting_pulls: HashMap<i32, Vec<(usize, u64, u64, bool)>>,
    entries: HashMap<i32, Entry>,
    rsp: HashMap<i32, RspEntry>,
    compression: Option<GradientCompression>,
    multi_precision: bool,
}

/// What the receiver thread and `RunServer` share.
pub struct ServerCore {
    node: Arc<Node>,
    num_workers: usize,
    /// The order of sync rounds' sums.
    order: SumOrder,
    sync: AtomicBool,
    state: Mutex<State>,
    updater: RwLock<Option<IntUpdater>>,
    controller: RwLock<Option<Controller>>,
    jobs: (Sender<Job>, Receiver<Job>),
    /// The dense rounds handed to the `RunServer` thread and not yet answered.
    applying: Applying,
    /// Buffers for pushed bodies (see [`PushBodies`]), kept for the next ones.
    buffers: BodyBuffers,
    /// World ranks of workers 0 and 1, the partners whose pulls of one value may be answered
    /// once (`Msg::Relay`); `None` with fewer than two workers.
    partners: Option<[usize; 2]>,
}

/// A server process's store.
pub struct Server {
    core: Arc<ServerCore>,
    /// Rank among the servers.
    rank: usize,
}

/// Answered values from this size on are copied once for all the requests they answer and
/// sent from that copy in place, each answer a two-part message whose body a worker receives
/// straight into its pulled array; smaller ones go in a message of their own for each request
/// (the MPI transport copies bodies this small into their message anyway).
const SHARED_ANSWER_MIN: usize = 64 << 10;

/// Reads an array's bytes once pending engine writes (an updater's ops) have finished.
fn read_now<R>(a: &NDArray, f: impl FnOnce(&[u8]) -> R) -> Result<R> {
    engine().run_sync(&[a.var()], &[], || a.read_bytes(f))
}

/// Writes an array's bytes once pending engine reads and writes have finished.
fn write_now<R>(a: &NDArray, f: impl FnOnce(&mut [u8]) -> R) -> Result<R> {
    engine().run_sync(&[], &[a.var()], || a.write_bytes(f))
}

impl Server {
    /// A server: it answers messages from now on; updates wait for `RunServer`.
    pub fn start(node: Arc<Node>) -> Result<Server> {
        let rank = node.ranks_of(Role::Server).iter().position(|&r| r == node.rank).unwrap_or(0);
        let workers = node.ranks_of(Role::Worker);
        let state = State { members: Members::new(workers.clone()), push_counts: HashMap::new(), waiting_pulls: HashMap::new(), entries: HashMap::new(), rsp: HashMap::new(), compression: None, multi_precision: false };
        let core = Arc::new(ServerCore {
            num_workers: workers.len(),
            order: sum_order()?,
            node: Arc::clone(&node),
            sync: AtomicBool::new(false),
            state: Mutex::new(state),
            updater: RwLock::new(None),
            controller: RwLock::new(None),
            jobs: unbounded(),
            applying: Applying::default(),
            buffers: BodyBuffers::default(),
            partners: (workers.len() >= 2).then(|| [workers[0], workers[1]]),
        });
        let c = Arc::clone(&core);
        node.set_handler(Arc::new(move |source, bytes| c.handle(source, bytes)));
        node.set_placement(Arc::new(PushBodies { core: Arc::clone(&core), landing: Mutex::new(HashMap::new()) }));
        let weak = Arc::downgrade(&core);
        node.watch.add_source(Box::new(move |out: &mut Vec<Owe>| {
            if let Some(core) = weak.upgrade() {
                core.owed(out);
            }
        }));
        node.watch.set_label(format!("server {rank}"));
        Ok(Server { core, rank })
    }

    /// Rank among the servers.
    pub fn rank(&self) -> i32 {
        self.rank as i32
    }

    /// Number of workers.
    pub fn group_size(&self) -> i32 {
        self.core.num_workers as i32
    }

    /// Installs the updater (re-entrant: the controller may call this from `RunServer`).
    pub fn set_updater(&self, updater: Option<IntUpdater>) {
        *self.core.updater.write() = updater;
    }

    /// Serves until worker 0 sends `StopServer`: the all-node barrier, the job loop (updater
    /// and controller calls), the final all-node barrier, then MPI is finalised.
    pub fn run(&self, controller: Option<Controller>) {
        *self.core.controller.write() = controller;
        self.core.node.barrier_all("at the start");
        let rx = self.core.jobs.1.clone();
        while let Ok(job) = rx.recv() {
            match job {
                Job::Stop => break,
                Job::Update { key, recv, stored, done } => {
                    let updater = self.core.updater.read().clone();
                    if let Some(u) = updater {
                        u(key, recv, stored);
                    }
                    let _ = done.send(());
                }
                Job::Apply(round) => {
                    let updater = self.core.updater.read().clone();
                    if let Some(u) = updater {
                        u(round.key, round.recv.clone(), round.stored.clone());
                    }
                    let key = round.key;
                    self.core.answer_applied(round);
                    self.core.applying.finish(key);
                }
                Job::Control { id, body, done } => {
                    let controller = self.core.controller.read().clone();
                    match controller {
                        Some(c) => c(id, &body),
                        None => eprintln!("libkvstore: command {id} for the controller, but RunServer was given none"),
                    }
                    let _ = done.send(());
                }
            }
        }
        let watchdog = super::exit_watchdog("server exit", &self.core.node);
        self.core.node.barrier_all("at exit");
        self.core.node.finalize();
        drop(watchdog);
    }
}

impl ServerCore {
    /// What this server waits for from workers: the pushes of its open sync rounds, and
    /// arrivals at a barrier in progress (server 0). Skipped, until the next look, while the
    /// state is busy for longer than a moment.
    fn owed(&self, out: &mut Vec<Owe>) {
        let Some(state) = self.state.try_lock_for(std::time::Duration::from_millis(100)) else { return };
        let workers = state.members.workers();
        let joined = state.members.joined();
        let rounds = state.entries.iter().map(|(k, e)| (*k, e.round.missing(joined))).chain(state.rsp.iter().map(|(k, e)| (*k, e.round.missing(joined))));
        for (key, (missing, pushed)) in rounds {
            out.extend(missing.into_iter().map(|r| Owe { peer: workers[r], what: What::RoundPush { key, pushed } }));
        }
        out.extend(state.members.missing().into_iter().map(|(peer, exit)| Owe { peer, what: What::BarrierArrival { exit } }));
    }

    /// Answers request `req` of rank `dest` without waiting for the bytes to leave (the
    /// receiver goes on with the next message). An answer without a value goes express: a
    /// push's acknowledgement does not wait behind pulled values bound for the same worker.
    fn reply(&self, dest: usize, req: u64, result: std::result::Result<&[u8], String>) {
        let (msg, express) = match &result {
            Ok(data) => (wire::encode(&Msg::Reply { req, ok: true, data }), data.is_empty()),
            Err(e) => (wire::encode(&Msg::Reply { req, ok: false, data: e.as_bytes() }), true),
        };
        self.node.send_owned(dest, msg, express);
    }

    /// Runs `job` on the `RunServer` thread and waits for it.
    fn exec(&self, make: impl FnOnce(Sender<()>) -> Job) {
        let (tx, rx) = crossbeam::channel::bounded(1);
        if self.jobs.0.send(make(tx)).is_ok() {
            let _ = rx.recv();
        }
    }

    fn handle(&self, source: usize, bytes: &[u8]) {
        self.handle_with_body(source, bytes, None)
    }

    /// Handles the message of `bytes` from `source`; with `body`, a push whose values were
    /// received apart from its head (`bytes`, see [`PushBodies`]).
    fn handle_with_body(&self, source: usize, bytes: &[u8], body: Option<Vec<u8>>) {
        let msg = match wire::decode(bytes) {
            Ok(m) => m,
            Err(e) => {
                eprintln!("libkvstore: server received a bad message from rank {source}: {e}");
                return;
            }
        };
        match &msg {
            Msg::Push { key, .. } | Msg::PullAfter { key, .. } | Msg::Pull { key, .. } => self.applying.wait_key(*key),
            _ => self.applying.wait_all(),
        }
        match msg {
            Msg::Push { req, key, dtype, flags, len, at, chunk, data } => {
                super::failpoint::check_push(len as usize);
                // The worker ranks whose push this is (a paired push is two workers'), and
                // their world ranks.
                let pushers = {
                    let mut state = self.state.lock();
                    state.members.pushers(source, flags, &|| format!("a push of key {key}")).map(|ranks| {
                        let world: Vec<usize> = ranks.iter().map(|&r| state.members.workers()[r]).collect();
                        if flags & wire::PUSH_INIT == 0 && at == 0 {
                            // A push is counted at its first chunk: a pull waiting for it joins
                            // its round then, and gets each chunk as the chunk's round completes.
                            for &w in &world {
                                *state.push_counts.entry((key, w)).or_default() += 1;
                            }
                        }
                        (ranks, world)
                    })
                };
                let (ranks, world) = match pushers {
                    Ok(p) => p,
                    Err(e) => return self.reply(source, req, Err(e.message().to_string())),
                };
                let data = match body {
                    Some(b) => Cow::Owned(b),
                    None => Cow::Borrowed(data),
                };
                if let Err(e) = self.push(source, req, key, dtype, flags, wire::Span { len, at, chunk }, data, &ranks) {
                    self.reply(source, req, Err(e.message().to_string()));
                }
                for w in world {
                    self.release_pulls(w, key);
                }
            }
            Msg::PullAfter { req, key, after, relay } => {
                let placed = {
                    let mut state = self.state.lock();
                    if state.push_counts.get(&(key, source)).copied().unwrap_or(0) < after {
                        state.waiting_pulls.entry(key).or_default().push((source, after, req, relay));
                        Placed::Deferred(None)
                    } else {
                        self.defer_pull(&mut state, source, req, key, relay)
                    }
                };
                match placed {
                    Placed::Now => self.pull(source, req, key),
                    Placed::Deferred(chunks) => self.answer_chunks(chunks),
                }
            }
            Msg::Pull { req, key } => self.pull(source, req, key),
            Msg::Command { req, id, body } => {
                let r = self.command(id, body);
                self.reply(source, req, r.as_ref().map(|_| &[][..]).map_err(|e| e.message().to_string()));
            }
            Msg::HasUpdater { req } => {
                let has = self.updater.read().is_some() as u8;
                self.reply(source, req, Ok(&[has]));
            }
            Msg::RspPush { req, key, dtype, flags, part_rows, row_len, ids, data } => {
                if let Err(e) = self.rsp_push(source, req, key, dtype, flags, (part_rows as usize, row_len as usize), &ids, data) {
                    self.reply(source, req, Err(e.message().to_string()));
                }
            }
            Msg::RspPull { req, key, ids } => {
                let state = self.state.lock();
                let answer = match state.rsp.get(&key) {
                    None => Err(format!("row_sparse key {key} has not been inited on this server")),
                    Some(e) => {
                        let rb = e.row_len * e.dtype.size();
                        match ids.iter().find(|&&r| usize::try_from(r).map_or(true, |r| r >= e.part_rows)) {
                            Some(bad) => Err(format!("row {bad} is out of range for key {key}: this server holds {} rows", e.part_rows)),
                            None => {
                                let mut rows = Vec::with_capacity(ids.len() * rb);
                                for &r in &ids {
                                    rows.extend_from_slice(&e.memory[r as usize * rb..(r as usize + 1) * rb]);
                                }
                                Ok(rows)
                            }
                        }
                    }
                };
                drop(state);
                match answer {
                    Ok(rows) => self.reply(source, req, Ok(&rows)),
                    Err(e) => self.reply(source, req, Err(e)),
                }
            }
            Msg::Join { req } => self.join(source, req),
            Msg::Barrier { req, exit, placed } => self.barrier(source, req, exit, placed),
            Msg::Reply { .. } | Msg::ReplyPart { .. } | Msg::Relay { .. } => eprintln!("libkvstore: a server received a reply; ignored"),
            Msg::PairPush { .. } | Msg::PairLeave => eprintln!("libkvstore: a server received a message between workers; ignored"),
        }
    }

    /// Places a `PullAfter` of `source` whose push has arrived: in that push's sync round
    /// while it is open (answered by `advance_dense`: chunk by chunk as the chunks' rounds
    /// complete, the chunks completed already at once; or whole after the update); `Now` when
    /// it is to be answered now (the round has been applied, async mode, or no such round).
    fn defer_pull(&self, state: &mut State, source: usize, req: u64, key: i32, relay: bool) -> Placed {
        if !self.sync.load(Ordering::SeqCst) {
            return Placed::Now;
        }
        let Ok(worker) = state.members.active_worker(source, &|| format!("a pull of key {key}")) else { return Placed::Now };
        match state.entries.get_mut(&key) {
            Some(e) if e.round.has_pushed(worker) => {
                let pull = Request { source, req, want_value: true, pull: true, chunk: None, relay };
                e.round.defer_pull(pull);
                if e.round.decided() != Some(Answering::Streamed) {
                    return Placed::Deferred(None);
                }
                let chunks = e.round.completed().into_iter().map(|i| (e.round.span(i), vec![pull])).collect();
                Placed::Deferred(e.merged.clone().map(|value| ChunkAnswers { value, chunks }))
            }
            _ => Placed::Now,
        }
    }

    /// After a push of `source`: places the `PullAfter`s that waited for it.
    fn release_pulls(&self, source: usize, key: i32) {
        let mut now = Vec::new();
        let mut chunks = Vec::new();
        {
            let mut guard = self.state.lock();
            let state = &mut *guard;
            for (req, relay) in take_due(state, source, key) {
                match self.defer_pull(state, source, req, key, relay) {
                    Placed::Now => now.push(req),
                    Placed::Deferred(c) => chunks.push(c),
                }
            }
        }
        for c in chunks {
            self.answer_chunks(c);
        }
        for req in now {
            self.pull(source, req, key);
        }
    }

    /// Answers a pull with the stored part, once a round of the key being applied is (a
    /// `PullAfter` released by the push that completed that round gets its update).
    fn pull(&self, source: usize, req: u64, key: i32) {
        self.applying.wait_key(key);
        let value = {
            let state = self.state.lock();
            state.entries.get(&key).map(|e| e.stored_dtype.clone().unwrap_or_else(|| e.stored.clone()))
        };
        match value {
            Some(v) => {
                let head = wire::reply_header(req, true, 0);
                let answer = |b: &[u8]| self.send_values(b, v.dtype(), vec![ValueAnswer { dest: source, head, range: 0..b.len() }]);
                if let Err(e) = read_now(&v, answer) {
                    self.reply(source, req, Err(e.message().to_string()));
                }
            }
            None => self.reply(source, req, Err(format!("key {key} has not been inited on this server"))),
        }
    }

    fn command(&self, id: i32, body: &[u8]) -> Result<()> {
        match Command::from_id(id) {
            Some(Command::StopServer) => {
                let _ = self.jobs.0.send(Job::Stop);
            }
            Some(Command::SyncMode) => self.sync.store(true, Ordering::SeqCst),
            Some(Command::SetGradientCompression) => {
                self.state.lock().compression = decode_compression(&String::from_utf8_lossy(body))?;
            }
            Some(Command::SetProfilerParams) => {}
            Some(Command::SetMultiPrecision) => self.set_multi_precision()?,
            Some(Command::Controller) => {
                let end = body.iter().position(|&b| b == 0).unwrap_or(body.len());
                let body = CString::new(&body[..end]).map_err(|_| crate::Error::new("command body"))?;
                self.exec(|done| Job::Control { id, body, done });
            }
            None => {}
        }
        Ok(())
    }

    /// MXNet's `CreateMultiPrecisionCopies`: float32 master copies of non-float32 keys.
    fn set_multi_precision(&self) -> Result<()> {
        let mut state = self.state.lock();
        if state.multi_precision {
            return Ok(());
        }
        state.multi_precision = true;
        for e in state.entries.values_mut() {
            if e.dtype == DType::Float32 {
                continue;
            }
            crate::ensure!(e.round.is_empty(), "Multiprecision mode can not be set while pushes are underway");
            let master = NDArray::zeros(e.stored.shape(), STORE_CONTEXT, DType::Float32)?;
            read_now(&e.stored, |s| write_now(&master, |d| byte_kernels().copy_cast(e.dtype, s, DType::Float32, d, 1)))??;
            e.stored_dtype = Some(std::mem::replace(&mut e.stored, master));
            e.merged = None;
        }
        for (key, e) in state.rsp.iter_mut() {
            if e.dtype == DType::Float32 {
                continue;
            }
            crate::ensure!(e.round.is_empty(), "Multiprecision mode can not be set while pushes are underway (key {key})");
            let rows = engine().run_sync(&[e.stored.var()], &[], || e.stored.rows_now())??;
            let master = NDArray::empty_row_sparse(e.stored.shape(), STORE_CONTEXT, DType::Float32)?;
            master.set_rows_now(&rows.ids, cast_buffer(e.dtype, &rows.data, DType::Float32)?)?;
            e.stored = master;
            e.merged = (Vec::new(), Vec::new());
        }
        Ok(())
    }

    /// A row_sparse push (MXNet's `DataHandleRowSparse`): the first is the init; then, in
    /// sync mode, the round's pushes are summed (in worker-rank order, see `round`) over the
    /// union of their rows and applied once every worker has pushed or joined; in async mode
    /// each push with rows is applied at once.
    #[allow(clippy::too_many_arguments)]
    fn rsp_push(&self, source: usize, req: u64, key: i32, dtype: i32, flags: u8, (part_rows, row_len): (usize, usize), ids: &[i64], data: &[u8]) -> Result<()> {
        let dtype = DType::from_code(dtype)?;
        crate::ensure!(flags & wire::PUSH_COMPRESSED == 0, "Gradient compression for row sparse storage type is not supported");
        let rb = row_len * dtype.size();
        crate::ensure!(row_len > 0 && data.len() == ids.len() * rb, "row_sparse push of {} bytes for {} rows of {row_len} {}", data.len(), ids.len(), dtype.name());
        crate::ensure!(ids.iter().all(|&r| r >= 0 && (r as usize) < part_rows), "row_sparse push of key {key} names rows outside this server's {part_rows} rows");
        let mut state = self.state.lock();
        let worker = state.members.active_worker(source, &|| format!("a push of row_sparse key {key}"))?;
        let mp = state.multi_precision && dtype != DType::Float32;
        let work = if mp { DType::Float32 } else { dtype };
        if !state.rsp.contains_key(&key) {
            crate::ensure!(!state.entries.contains_key(&key), "key {key} holds a default value on this server");
            crate::ensure!(!ids.is_empty(), "init with empty data is not supported (row_sparse key {key})");
            // The init push's rows become rows 0.. of the stored value, as MXNet's
            // InitRowSparseStored (an init is normally every row of the part).
            let n = ids.len();
            let stored = NDArray::empty_row_sparse(&[n, row_len], STORE_CONTEXT, work)?;
            stored.set_rows_now(&(0..n as i64).collect::<Vec<_>>(), cast_buffer(dtype, data, work)?)?;
            let mut memory = vec![0u8; part_rows.max(n) * rb];
            memory[..data.len()].copy_from_slice(data);
            let round = Round::new(self.num_workers, self.order);
            state.rsp.insert(key, RspEntry { dtype, part_rows, row_len, stored, memory, merged: (Vec::new(), Vec::new()), round });
            drop(state);
            self.reply(source, req, Ok(&[]));
            return Ok(());
        }
        let sync = self.sync.load(Ordering::SeqCst);
        let updater = self.updater.read().is_some();
        let st = &mut *state;
        let e = st.rsp.get_mut(&key).ok_or_else(|| crate::Error::new("entry vanished"))?;
        crate::ensure!(e.dtype == dtype && e.row_len == row_len, "key {key}: row_sparse push of {} rows of {row_len}, the key holds {} rows of {}", dtype.name(), e.dtype.name(), e.row_len);
        let request = Request { source, req, want_value: false, pull: false, chunk: None, relay: false };
        let value = (ids.to_vec(), cast_buffer(dtype, data, work)?.bytes().to_vec());
        if !sync {
            crate::ensure!(updater, "Updater needs to be set for async mode (key {key})");
            if ids.is_empty() {
                drop(state);
                self.reply(source, req, Ok(&[]));
                return Ok(());
            }
            e.merged = value;
            return self.finish_rsp(state, key, vec![request]);
        }
        if e.round.arrive(worker, request, st.members.joined())? {
            e.fold(value)?;
        } else {
            e.round.hold(worker, value);
        }
        self.advance_rsp(state, key)
    }

    /// Folds the held pushes of `key`'s sync round that are due, and finishes the round once
    /// every worker has pushed or joined.
    fn advance_rsp(&self, mut guard: MutexGuard<State>, key: i32) -> Result<()> {
        let state = &mut *guard;
        let e = state.rsp.get_mut(&key).ok_or_else(|| crate::Error::new("entry vanished"))?;
        match advance(e, state.members.joined())? {
            Some(requests) => self.finish_rsp(guard, key, requests),
            None => Ok(()),
        }
    }

    /// Applies the merged rows of `key` (update, or assignment without an updater) and
    /// answers `requests`.
    fn finish_rsp(&self, mut state: MutexGuard<State>, key: i32, requests: Vec<Request>) -> Result<()> {
        let updater = self.updater.read().is_some();
        let e = state.rsp.get_mut(&key).ok_or_else(|| crate::Error::new("entry vanished"))?;
        let (dtype, work) = (e.dtype, e.stored.dtype());
        let (mids, mdata) = std::mem::take(&mut e.merged);
        let stored = e.stored.clone();
        let merged = NDArray::empty_row_sparse(stored.shape(), STORE_CONTEXT, work)?;
        let mut buf = crate::base::buffer::Buffer::zeroed(mdata.len())?;
        buf.bytes_mut().copy_from_slice(&mdata);
        merged.set_rows_now(&mids, buf)?;
        drop(state);
        if updater {
            let st = stored.clone();
            self.exec(|done| Job::Update { key, recv: merged, stored: st, done });
        } else {
            // MXNet copies the merged value over the stored one: the key keeps only the
            // round's rows.
            let mut buf = crate::base::buffer::Buffer::zeroed(mdata.len())?;
            buf.bytes_mut().copy_from_slice(&mdata);
            engine().run_sync(&[], &[stored.var()], || stored.set_rows_now(&mids, buf))??;
        }
        let rows = engine().run_sync(&[stored.var()], &[], || stored.rows_now())??;
        let packed = cast_buffer(work, &rows.data, dtype)?;
        {
            let mut state = self.state.lock();
            if let Some(e) = state.rsp.get_mut(&key) {
                let n = packed.bytes().len().min(e.memory.len());
                e.memory[..n].copy_from_slice(&packed.bytes()[..n]);
            }
        }
        for r in requests {
            self.reply(r.source, r.req, Ok(&[]));
        }
        Ok(())
    }

    /// A dense push (the whole part, or one chunk of it: `span`) of the worker ranks `pushers`
    /// (`Members::pushers`).
    #[allow(clippy::too_many_arguments)]
    fn push(&self, source: usize, req: u64, key: i32, dtype: i32, flags: u8, span: wire::Span, data: Cow<[u8]>, pushers: &[usize]) -> Result<()> {
        let dtype = DType::from_code(dtype)?;
        let (len, at) = (span.len as usize, span.at as usize);
        let mut state = self.state.lock();
        let mp = state.multi_precision && dtype != DType::Float32;
        let work_dtype = if mp { DType::Float32 } else { dtype };
        // The pushed values in the dtype the server works in: the received ones when no
        // conversion is needed (then `data` is moved here, and `converted_from` is empty).
        let mut converted_from = None;
        let recv: Cow<[u8]> = if flags & wire::PUSH_COMPRESSED != 0 {
            let gc = state.compression.ok_or_else(|| crate::Error::new("a compressed push reached a server without compression parameters"))?;
            crate::ensure!(dtype == DType::Float32, "compressed pushes must be float32");
            crate::ensure!(span == wire::Span::whole(span.len), "compressed pushes are sent whole, not in chunks");
            crate::ensure!(data.len() == gc.packed_bytes(len), "compressed push of {} bytes for {len} values", data.len());
            let mut out = vec![0f32; len];
            byte_kernels().decompress(&gc, &data, &mut out);
            Cow::Owned(bytemuck::cast_slice(&out).to_vec())
        } else {
            let n = data.len() / dtype.size();
            crate::ensure!(
                data.len().is_multiple_of(dtype.size()) && at.checked_add(n).is_some_and(|end| end <= len) && (span.chunk != 0 || (at == 0 && n == len)),
                "push of {} bytes at element {at} for {len} {} values",
                data.len(),
                dtype.name()
            );
            if mp {
                let mut out = vec![0u8; n * 4];
                byte_kernels().copy_cast(dtype, &data, DType::Float32, &mut out, 1);
                converted_from = Some(data);
                Cow::Owned(out)
            } else {
                data
            }
        };
        crate::ensure!(!state.rsp.contains_key(&key), "key {key} holds a row_sparse value on this server");
        if let std::collections::hash_map::Entry::Vacant(e) = state.entries.entry(key) {
            // The first push of a key is its init.
            crate::ensure!(span.chunk == 0, "key {key}: an init push is sent whole, not in chunks");
            let stored = NDArray::zeros(&[len], STORE_CONTEXT, work_dtype)?;
            write_now(&stored, |d| d.copy_from_slice(&recv))?;
            let stored_dtype = if mp {
                let s = NDArray::zeros(&[len], STORE_CONTEXT, dtype)?;
                let pushed = converted_from.as_deref().unwrap_or(&recv);
                write_now(&s, |d| d.copy_from_slice(pushed))?;
                Some(s)
            } else {
                None
            };
            let round = PartRound::new(self.num_workers, self.order, len);
            e.insert(Entry { dtype, stored, stored_dtype, merged: None, round });
            drop(state);
            self.reply(source, req, Ok(&[]));
            return Ok(());
        }
        let sync = self.sync.load(Ordering::SeqCst);
        let st = &mut *state;
        let e = st.entries.get_mut(&key).ok_or_else(|| crate::Error::new("entry vanished"))?;
        crate::ensure!(e.dtype == dtype && e.stored.size() == len, "key {key}: push of {len} {} values, the key holds {} {}", dtype.name(), e.stored.size(), e.dtype.name());
        let want_value = flags & wire::PUSH_PULL != 0;
        if !sync {
            crate::ensure!(span.chunk == 0, "key {key}: dist_async pushes are sent whole, not in chunks");
            crate::ensure!(self.updater.read().is_some(), "Updater needs to be set for async mode (key {key})");
            crate::ensure!(flags & (wire::PUSH_PAIRED | wire::PUSH_FOR_PARTNER) == 0, "key {key}: a paired push in dist_async");
            e.fold_whole(&recv)?;
            self.buffers.give(recv);
            return self.finish_dense(state, key, vec![Request { source, req, want_value, pull: false, chunk: None, relay: false }]);
        }
        let index = e.round.chunk_of(at, recv.len() / work_dtype.size(), span.chunk as usize)?;
        let chunk = e.round.chunked().then(|| e.round.span(index));
        let request = Request { source, req, want_value, pull: false, chunk, relay: false };
        let now = match pushers[..] {
            [worker] => e.round.arrive(index, worker, request, st.members.joined())?,
            _ => e.round.arrive_pair(index, request)?,
        };
        if now {
            e.fold_chunk(index, &recv)?;
            self.buffers.give(recv);
        } else {
            // A value received into a buffer of its own is moved, not copied.
            e.round.hold(index, pushers[0], recv.into_owned());
        }
        // The pulls waiting for this push join its round before the round's chunks are
        // answered (the push completing a round does so right here): partners' pulls are then
        // answered together (`relayed`), and every pull with the round's stream.
        let mut early = Vec::new();
        if at == 0 {
            let world: Vec<usize> = pushers.iter().map(|&r| st.members.workers()[r]).collect();
            for w in world {
                early.extend(self.join_round(st, w, key));
            }
        }
        let advanced = self.advance_dense(state, key, Some(index));
        for answers in early {
            self.answer_chunks(answers);
        }
        advanced
    }

    /// Places the `PullAfter`s of `source` for `key` that its push just counted has made due,
    /// in its open sync round (see `defer_pull`); returns the answers of the round's chunks
    /// completed before, to send.
    fn join_round(&self, state: &mut State, source: usize, key: i32) -> Vec<Option<ChunkAnswers>> {
        let due = take_due(state, source, key);
        let mut out = Vec::new();
        for (req, relay) in due {
            match self.defer_pull(state, source, req, key, relay) {
                Placed::Deferred(c) => out.push(c),
                // Not in a sync round after all: `release_pulls` answers it after the push.
                Placed::Now => state.waiting_pulls.entry(key).or_default().push((source, 0, req, relay)),
            }
        }
        out
    }

    /// Folds the held pushes of `key`'s sync round that are due (of chunk `which`, or of
    /// every chunk), and ends the rounds of the chunks every worker has pushed (or joined
    /// without pushing). A round without an updater answers each completed chunk at once
    /// (`chunks::Answering::Streamed`): its pushes, and the pulls waiting for the round, get
    /// that chunk, and the part's sum becomes the stored value when its last chunk completes.
    /// Otherwise the part is updated and answered whole once every chunk is in
    /// (`finish_dense`).
    fn advance_dense(&self, mut guard: MutexGuard<State>, key: i32, which: Option<usize>) -> Result<()> {
        let updater = self.updater.read().is_some();
        let state = &mut *guard;
        let joined = state.members.joined();
        let e = state.entries.get_mut(&key).ok_or_else(|| crate::Error::new("entry vanished"))?;
        let indices = match which {
            Some(i) => i..i + 1,
            None => 0..e.round.count(),
        };
        let mut streamed = Vec::new();
        for index in indices {
            for v in e.round.ready(index, joined) {
                e.fold_chunk(index, &v)?;
                self.buffers.give(Cow::Owned(v));
            }
            let Some(requests) = e.round.complete_chunk(index, joined) else { continue };
            let refreshes_copy = e.stored_dtype.is_some();
            match e.round.answering(|| !updater && !refreshes_copy) {
                Answering::Streamed => {
                    let mut to = requests;
                    to.extend_from_slice(e.round.pulls());
                    streamed.push((e.round.span(index), to));
                }
                Answering::Whole => e.round.keep(requests),
            }
        }
        let answers = match (streamed.is_empty(), &e.merged) {
            (false, Some(value)) => Some(ChunkAnswers { value: value.clone(), chunks: streamed }),
            (false, None) => crate::bail!("a finished round without a sum"),
            (true, _) => None,
        };
        if !e.round.complete() {
            drop(guard);
            self.answer_chunks(answers);
            return Ok(());
        }
        let answering = e.round.decided();
        // The pulls a streamed round held have had every chunk.
        let requests = e.round.finish();
        if answering == Some(Answering::Streamed) {
            // The round's sum becomes the stored value, and the old one the next round's sum
            // (see `finish_dense`), before the last chunk's answers go.
            let merged = e.merged.take().ok_or_else(|| crate::Error::new("a finished round without a sum"))?;
            e.merged = Some(std::mem::replace(&mut e.stored, merged));
            drop(guard);
            self.answer_chunks(answers);
            return Ok(());
        }
        self.finish_dense(guard, key, requests)
    }

    /// Sends completed chunks of a round's value (see `advance_dense`): a pull gets a
    /// `ReplyPart` of the chunk, a push of the chunk its answer (with the chunk for a
    /// push-pull).
    fn answer_chunks(&self, answers: Option<ChunkAnswers>) {
        let Some(ChunkAnswers { value, chunks }) = answers else { return };
        let (dtype, esz) = (value.dtype(), value.dtype().size());
        let sent = read_now(&value, |bytes| {
            for ((first, count), requests) in &chunks {
                // The value itself is being folded into by the chunks still arriving.
                let chunk = &bytes[first * esz..(first + count) * esz];
                let mut answers = Vec::with_capacity(requests.len());
                let (requests, relayed) = self.relayed(requests);
                for (r, partner_req) in requests.iter().zip(relayed) {
                    let head = if let Some(partner_req) = partner_req {
                        wire::relay_header(r.req, (first * esz) as u64, false, partner_req)
                    } else if r.pull {
                        wire::reply_part_header(r.req, (first * esz) as u64, 0)
                    } else if r.want_value {
                        wire::reply_header(r.req, true, 0)
                    } else {
                        self.reply(r.source, r.req, Ok(&[]));
                        continue;
                    };
                    answers.push(ValueAnswer { dest: r.source, head, range: 0..chunk.len() });
                }
                self.send_values(chunk, dtype, answers);
            }
        });
        if let Err(e) = sent {
            for r in chunks.iter().flat_map(|(_, rs)| rs) {
                self.reply(r.source, r.req, Err(e.message().to_string()));
            }
        }
    }

    /// The round of `key` is complete (or an async push arrived): update (or assign), then
    /// answer every push of it, with the value for push-pulls. With an updater that happens on
    /// the `RunServer` thread while this one goes on with other keys' messages (`Applying`):
    /// the updates of a step's keys run back to back there, each answered as soon as it is
    /// applied, with no thread handoff in between.
    fn finish_dense(&self, mut state: MutexGuard<State>, key: i32, requests: Vec<Request>) -> Result<()> {
        let updater = self.updater.read().is_some();
        let e = state.entries.get_mut(&key).ok_or_else(|| crate::Error::new("entry vanished"))?;
        let dtype = e.dtype;
        let merged = e.merged.clone().ok_or_else(|| crate::Error::new("a finished round without a sum"))?;
        if !updater {
            // Without an updater the round's sum is the new value: it becomes the stored
            // array, and the old one the next round's sum, which that round's first push
            // overwrites whole. A pull still reading the old array holds its engine variable,
            // which that write waits for.
            let old = std::mem::replace(&mut e.stored, merged.clone());
            e.merged = Some(old);
        }
        let round = Applied { key, recv: merged, stored: e.stored.clone(), stored_dtype: e.stored_dtype.clone().map(|sd| (sd, dtype)), requests };
        drop(state);
        if updater {
            self.applying.start(key);
            if self.jobs.0.send(Job::Apply(round)).is_err() {
                // `RunServer` has stopped: nothing will apply the round.
                self.applying.finish(key);
                crate::bail!("key {key}: the server has stopped; this round is not applied");
            }
            return Ok(());
        }
        self.answer(round)
    }

    /// After a round's update on the `RunServer` thread: its answers (a failure reaches every
    /// request of the round).
    fn answer_applied(&self, round: Applied) {
        let requests = round.requests.clone();
        if let Err(e) = self.answer(round) {
            for r in requests {
                self.reply(r.source, r.req, Err(e.message().to_string()));
            }
        }
    }

    /// Answers a round's requests with the stored value (after refreshing its key's-dtype copy
    /// with multi-precision).
    fn answer(&self, round: Applied) -> Result<()> {
        let Applied { stored, stored_dtype, requests, .. } = round;
        if let Some((sd, dtype)) = &stored_dtype {
            read_now(&stored, |s| write_now(sd, |d| byte_kernels().copy_cast(DType::Float32, s, *dtype, d, 1)))??;
        }
        let answer = stored_dtype.map_or(stored, |(sd, _)| sd);
        let (dtype, esz) = (answer.dtype(), answer.dtype().size());
        read_now(&answer, |value| {
            let mut answers = Vec::with_capacity(requests.len());
            let (requests, relayed) = self.relayed(&requests);
            for (r, partner_req) in requests.into_iter().zip(relayed) {
                if !r.want_value {
                    self.reply(r.source, r.req, Ok(&[]));
                    continue;
                }
                // A push-pull of one chunk gets that chunk of the value.
                let range = r.chunk.map_or(0..value.len(), |(first, count)| first * esz..(first + count) * esz);
                let head = match partner_req {
                    Some(partner_req) => wire::relay_header(r.req, 0, true, partner_req),
                    None => wire::reply_header(r.req, true, 0),
                };
                answers.push(ValueAnswer { dest: r.source, head, range });
            }
            self.send_values(value, dtype, answers);
        })
    }

    /// The requests of one range of a value to answer, each with the partner's pull it also
    /// answers: a pull whose worker relays (`Request::relay`) takes its partner's pull of the
    /// same range along (`Msg::Relay`; the partner's is then left out), so the value leaves
    /// this server once for both.
    fn relayed(&self, requests: &[Request]) -> (Vec<Request>, Vec<Option<u64>>) {
        let Some([w0, w1]) = self.partners else { return (requests.to_vec(), vec![None; requests.len()]) };
        let partner = |source: usize| if source == w0 { Some(w1) } else if source == w1 { Some(w0) } else { None };
        // First pair each relaying pull with a pull of its partner, then answer the rest.
        let mut along: Vec<Option<usize>> = vec![None; requests.len()];
        let mut taken = vec![false; requests.len()];
        for (i, r) in requests.iter().enumerate() {
            if !(r.pull && r.relay) || taken[i] {
                continue;
            }
            let Some(p) = partner(r.source) else { continue };
            if let Some(j) = (0..requests.len()).find(|&j| j != i && !taken[j] && along[j].is_none() && requests[j].pull && requests[j].source == p) {
                taken[j] = true;
                along[i] = Some(j);
            }
        }
        let mut out = Vec::with_capacity(requests.len());
        let mut relayed = Vec::with_capacity(requests.len());
        for (i, r) in requests.iter().enumerate() {
            if !taken[i] {
                out.push(*r);
                relayed.push(along[i].map(|j| requests[j].req));
            }
        }
        (out, relayed)
    }

    /// Sends each answer its range of `value` (bytes of `dtype`), without waiting: from one
    /// copy for them all (see [`SHARED_ANSWER_MIN`]), or where the value is smaller, the
    /// answers cover less than all of it, or the copy cannot be allocated, a copy each. A copy
    /// because the value itself is written again (the next round's sum, an update, the chunks
    /// still being folded into it) while the answers may still be leaving.
    fn send_values(&self, value: &[u8], dtype: DType, answers: Vec<ValueAnswer>) {
        let answered: usize = answers.iter().map(|a| a.range.len()).sum();
        let copy = (value.len() >= SHARED_ANSWER_MIN && answered >= value.len())
            .then(|| NDArray::with_bytes(&[value.len() / dtype.size()], STORE_CONTEXT, dtype, value).ok())
            .flatten();
        for ValueAnswer { dest, head, range } in answers {
            match &copy {
                Some(a) => self.node.send_parts(dest, head, Body::new(a, range), false),
                None => {
                    // Ranges come from the server's own rounds and chunks, always inside.
                    let mut msg = head;
                    msg.extend_from_slice(&value[range]);
                    self.node.send_owned(dest, msg, false);
                }
            }
        }
    }

    /// A worker has joined: the sync rounds waiting only for it complete now (its share is
    /// zero), and the barriers it held back are released.
    fn join(&self, source: usize, req: u64) {
        let released = self.state.lock().members.join(source);
        match released {
            Err(e) => return self.reply(source, req, Err(e.message().to_string())),
            Ok(waiters) => {
                self.reply(source, req, Ok(&[]));
                self.release(waiters);
            }
        }
        let (dense, sparse): (Vec<i32>, Vec<i32>) = {
            let state = self.state.lock();
            let open = |round_empty: bool| !round_empty;
            (
                state.entries.iter().filter(|(_, e)| open(e.round.is_empty())).map(|(k, _)| *k).collect(),
                state.rsp.iter().filter(|(_, e)| open(e.round.is_empty())).map(|(k, _)| *k).collect(),
            )
        };
        for key in dense {
            if let Err(e) = self.advance_dense(self.state.lock(), key, None) {
                eprintln!("libkvstore: completing the round of key {key} after a join failed: {e}");
            }
        }
        for key in sparse {
            if let Err(e) = self.advance_rsp(self.state.lock(), key) {
                eprintln!("libkvstore: completing the round of row_sparse key {key} after a join failed: {e}");
            }
        }
    }

    /// A worker barrier (server 0 coordinates them).
    fn barrier(&self, source: usize, req: u64, exit: bool, placed: u64) {
        let released = self.state.lock().members.barrier(source, req, exit, placed);
        match released {
            Ok(waiters) => self.release(waiters),
            Err(e) => self.reply(source, req, Err(e.message().to_string())),
        }
    }

    fn release(&self, waiters: Vec<Released>) {
        for ((dest, req), refused) in waiters {
            match refused {
                Some(e) => self.reply(dest, req, Err(e)),
                None => self.reply(dest, req, Ok(&[])),
            }
        }
    }
}

/// The `PullAfter`s of `source` for `key` that wait for a push it has now made (req, relay),
/// no longer waiting.
fn take_due(state: &mut State, source: usize, key: i32) -> Vec<(u64, bool)> {
    let count = state.push_counts.get(&(key, source)).copied().unwrap_or(0);
    let Some(list) = state.waiting_pulls.get_mut(&key) else { return Vec::new() };
    let mut due = Vec::new();
    list.retain(|&(s, after, req, relay)| {
        let ready = s == source && after <= count;
        if ready {
            due.push((req, relay));
        }
        !ready
    });
    if list.is_empty() {
        state.waiting_pulls.remove(&key);
    }
    due
}

/// Where a server receives the bodies of pushes (a worker sends a dense push's values apart
/// from its head): a buffer of the server's own for each body of `BodyBuffers::MIN_BYTES` or
/// more, so that a push held until the lower ranks of its round have been folded
/// (`Round::hold`) is moved there instead of copied out of the transport's buffer.
struct PushBodies {
    core: Arc<ServerCore>,
    /// Per source, the buffers its bodies are being received into, in the order their heads
    /// came (messages from one source are delivered in that order).
    landing: Mutex<HashMap<usize, VecDeque<Vec<u8>>>>,
}

impl Placement for PushBodies {
    fn place(&self, source: usize, head: &[u8], body_len: usize) -> Option<PlacedAt> {
        if body_len < BodyBuffers::MIN_BYTES || !matches!(wire::decode(head).ok()?, Msg::Push { data: [], .. }) {
            return None;
        }
        let mut buffer = self.core.buffers.take(body_len);
        let place = PlacedAt::in_buffer(&mut buffer);
        // Moving the Vec leaves its bytes where they are.
        self.landing.lock().entry(source).or_default().push_back(buffer);
        Some(place)
    }

    fn placed(&self, source: usize, head: &[u8]) {
        let body = self.landing.lock().get_mut(&source).and_then(VecDeque::pop_front);
        match body {
            Some(body) => self.core.handle_with_body(source, head, Some(body)),
            None => eprintln!("libkvstore: a server received a push body from rank {source} that it had not placed; ignored"),
        }
    }
}

/// Buffers for pushed bodies, kept once their values are folded: a fresh one per push would
/// take new pages (and fault them in) for every chunk.
#[derive(Default)]
struct BodyBuffers(Mutex<Vec<Vec<u8>>>);

impl BodyBuffers {
    /// Bodies smaller than this go to the transport's buffers (a copy of one costs little).
    const MIN_BYTES: usize = 256 << 10;
    /// At most this many buffers are kept, and none larger than `KEPT_MAX_BYTES`.
    const KEPT: usize = 64;
    const KEPT_MAX_BYTES: usize = 2 << 20;

    /// A buffer of `len` bytes (a kept one that holds them, else a new one).
    fn take(&self, len: usize) -> Vec<u8> {
        let kept = {
            let mut pool = self.0.lock();
            let pick = pool.iter().enumerate().filter(|(_, b)| b.capacity() >= len).min_by_key(|(_, b)| b.capacity()).map(|(i, _)| i);
            pick.map(|i| pool.swap_remove(i))
        };
        let mut buffer = kept.unwrap_or_default();
        buffer.resize(len, 0);
        buffer
    }

    /// Keeps `value`'s buffer for a later body, if it is one of its own.
    fn give(&self, value: Cow<[u8]>) {
        let Cow::Owned(buffer) = value else { return };
        if !(Self::MIN_BYTES..=Self::KEPT_MAX_BYTES).contains(&buffer.capacity()) {
            return;
        }
        let mut pool = self.0.lock();
        if pool.len() < Self::KEPT {
            pool.push(buffer);
        }
    }
}

impl Entry {
    /// Adds a pushed chunk `index` (in the working dtype) to its round's sum (copies it, for
    /// the chunk round's first).
    fn fold_chunk(&mut self, index: usize, value: &[u8]) -> Result<()> {
        let first = self.round.start_fold(index);
        let work = self.stored.dtype();
        let at = self.round.span(index).0 * work.size();
        let merged = self.merged()?;
        write_now(&merged, |d| {
            let Some(dst) = d.get_mut(at..at + value.len()) else {
                return Err(crate::Error::new(format!("a chunk of {} bytes at byte {at} of a {}-byte part", value.len(), d.len())));
            };
            if first {
                dst.copy_from_slice(value)
            } else {
                byte_kernels().add(work, dst, value)
            }
            Ok(())
        })?
    }

    /// Starts the sum with a whole pushed value (an async push).
    fn fold_whole(&mut self, value: &[u8]) -> Result<()> {
        let merged = self.merged()?;
        write_now(&merged, |d| d.copy_from_slice(value))
    }

    /// The array of the round's sum (made at the key's first round).
    fn merged(&mut self) -> Result<NDArray> {
        if let Some(m) = &self.merged {
            return Ok(m.clone());
        }
        let m = NDArray::zeros(&[self.stored.size()], STORE_CONTEXT, self.stored.dtype())?;
        self.merged = Some(m.clone());
        Ok(m)
    }
}

impl Folds for RspEntry {
    type Value = (Vec<i64>, Vec<u8>);

    fn round(&mut self) -> &mut Round<Self::Value> {
        &mut self.round
    }

    /// Adds pushed rows (in the working dtype) to the round's sum, over the union of rows.
    fn fold(&mut self, (ids, data): (Vec<i64>, Vec<u8>)) -> Result<()> {
        if self.round.start_fold() {
            self.merged = (ids, data);
            return Ok(());
        }
        let work = self.stored.dtype();
        let (mids, mdata) = std::mem::take(&mut self.merged);
        let (sum_ids, sum) = byte_kernels().sum_rows(work, self.row_len * work.size(), &[(&mids, &mdata), (&ids, &data)])?;
        self.merged = (sum_ids, sum.bytes().to_vec());
        Ok(())
    }
}

/// `data` (values of `from`) as a buffer of `to` values.
fn cast_buffer(from: DType, data: &[u8], to: DType) -> Result<crate::base::buffer::Buffer> {
    let mut out = crate::base::buffer::Buffer::zeroed(data.len() / from.size() * to.size())?;
    byte_kernels().copy_cast(from, data, to, out.bytes_mut(), 1);
    Ok(out)
}

/// A scheduler: it only joins the all-node barriers.
pub struct Scheduler {
    node: Arc<Node>,
}

impl Scheduler {
    /// A scheduler process's store.
    pub fn start(node: Arc<Node>) -> Scheduler {
        Scheduler { node }
    }

    /// Number of workers.
    pub fn group_size(&self) -> i32 {
        self.node.ranks_of(Role::Worker).len() as i32
    }

    /// `RunServer` on the scheduler: the start and final all-node barriers.
    pub fn run(&self) {
        self.node.barrier_all("at the start");
        self.node.barrier_all("at exit");
        self.node.finalize();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pushed_body_buffer_is_kept_and_handed_out_again() {
        let buffers = BodyBuffers::default();
        let len = 1 << 20;
        let first = buffers.take(len);
        assert_eq!(first.len(), len);
        let at = first.as_ptr();
        buffers.give(Cow::Owned(first));
        let again = buffers.take(len - 100);
        assert_eq!((again.as_ptr(), again.len()), (at, len - 100), "the kept buffer, sized to the body");
        buffers.give(Cow::Owned(again));
        assert_eq!(buffers.take(len).len(), len, "grown back to a full body");
    }

    #[test]
    fn only_buffers_of_bodies_sized_for_placing_are_kept() {
        let buffers = BodyBuffers::default();
        buffers.give(Cow::Owned(vec![0u8; BodyBuffers::MIN_BYTES - 1]));
        buffers.give(Cow::Owned(vec![0u8; BodyBuffers::KEPT_MAX_BYTES + 1]));
        buffers.give(Cow::Borrowed(&[0u8; 16][..]));
        assert!(buffers.0.lock().is_empty());
        for _ in 0..BodyBuffers::KEPT + 5 {
            buffers.give(Cow::Owned(vec![0u8; BodyBuffers::MIN_BYTES]));
        }
        assert_eq!(buffers.0.lock().len(), BodyBuffers::KEPT);
    }
}
