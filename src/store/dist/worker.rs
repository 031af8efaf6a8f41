//! A worker of a distributed store: keys are sharded over the servers; a push sends each part
//! to its server and completes when the server answers (in sync mode: after the round's
//! update); a pull asks every part's server and completes when all parts have arrived. Both
//! are engine ops on the key's buffer, so a pull runs after this worker's earlier push.
//! Every call has been checked by the store's planner before it gets here ([`Servers`]).

use super::byte_kernels;
use super::command::{encode_compression, Command};
use super::liveness::{Owe, What};
use super::names::DistMode;
use super::pairs::{self, OwnPiece, Owners, Pairing, Piece, Step, TheirPiece};
use super::role::Role;
use super::shard::{self, Balance, Load, Part, RowPart};
use super::transport::{Body, Landing, Node, PlacedAt, Placement};
use super::wire::{self, Msg};
use crate::backend::{GradientCompression, SumOrder};
use crate::engine::{engine, OpDone};
use crate::error::Result;
use crate::ndarray::{DType, NDArray, StorageType};
use crate::store::Servers;
use parking_lot::{Condvar, Mutex};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

/// How a key is spread over the servers.
#[derive(Clone)]
struct KeyParts {
    dtype: DType,
    /// The element parts, one per server holding some of the key (dense keys).
    parts: Vec<Part>,
    /// Gradient-compression residual of the merged value (one per key, as MXNet's workers).
    residual: Arc<Mutex<Vec<f32>>>,
    /// A row_sparse key's row ranges, one per server holding some of its rows (empty for
    /// dense keys).
    row_parts: Vec<RowPart>,
    /// Per part, whether this worker owns it in its pair (`pairs`); empty where the key's
    /// pushes are not paired (no pair, not float32, row_sparse).
    owned: Vec<bool>,
}

impl KeyParts {
    fn sparse(&self) -> bool {
        !self.row_parts.is_empty()
    }
}

/// The pushes of a dense key scheduled so far.
#[derive(Default)]
struct Pushes {
    /// How many (init pushes aside).
    count: u64,
    /// After the last, where that push leaves nothing in the way of a pull's answers: the
    /// engine's count of ops on the key's value once it was registered (`Engine::ops_on`).
    /// The push, which only reads the pushed values, then follows every earlier op on the
    /// value and has started by the time any server answers; a pull registered right after it
    /// can write its answers into the value as they come. `None`: a push-pull (its answers
    /// fill the value too), or hosted mode (the host's ops on the memory are not counted).
    clear_after: Option<u64>,
}

/// A request waiting for its servers' answers.
struct Pending {
    remaining: AtomicUsize,
    /// Finishes the engine op, with the servers' errors if any.
    done: Mutex<Option<OpDone>>,
    /// Where answered bytes go (pulls, push-pulls).
    target: Option<NDArray>,
    errors: Mutex<Vec<String>>,
    answers: Mutex<Vec<Vec<u8>>>,
    finished: Mutex<bool>,
    wake: Condvar,
    /// A pull sent ahead of its op (`PullAfter`): answers that arrive before the target is
    /// writable are kept here and written into it once it is, because until then the target
    /// may still be read or written by the ops before the pull (the copies out of the value
    /// pulled before; a fresh output's fill, in hosted mode where the output is lent to the
    /// store in place).
    early: Option<Mutex<Early>>,
    /// The target, held for the answers' bodies the transport receives straight into it
    /// (see [`Answers`]), from the first such body until every answer is in.
    landing: Mutex<Option<Landing>>,
    /// Answers that came whole while the target was held: written once it is let go.
    deferred: Mutex<Vec<(usize, Vec<u8>)>>,
}

/// See [`Pending::early`].
#[derive(Default)]
struct Early {
    /// The pull's op has started, or no op before it but the push it follows (which does
    /// not touch the target) was left when it was scheduled.
    writable: bool,
    /// (byte offset, bytes) of the answers kept.
    kept: Vec<(usize, Vec<u8>)>,
}

impl Pending {
    /// A pull sent before its op runs (see [`Pending::early`]); `writable`: its target already
    /// is.
    fn ahead(parts: usize, target: NDArray, writable: bool) -> Arc<Pending> {
        let early = Early { writable, kept: Vec::new() };
        Arc::new(Pending { early: Some(Mutex::new(early)), ..Pending::unshared(parts, None, Some(target)) })
    }

    /// Writes answered bytes at `offset` of the target, or keeps them until it is writable (or
    /// until the target is no longer held for bodies received into it).
    fn write(&self, target: &NDArray, offset: usize, data: &[u8]) {
        if let Some(early) = &self.early {
            let mut e = early.lock();
            if !e.writable {
                e.kept.push((offset, data.to_vec()));
                return;
            }
        }
        // Under the landing's lock: no body is placed into the target during the write.
        let landing = self.landing.lock();
        if landing.is_some() {
            self.deferred.lock().push((offset, data.to_vec()));
            return;
        }
        write_at(target, offset, data);
    }

    /// Every answer is in: the target is let go, and the answers deferred meanwhile written.
    fn release_target(&self) {
        let held = self.landing.lock().take();
        if held.is_none() {
            return;
        }
        drop(held);
        let deferred = std::mem::take(&mut *self.deferred.lock());
        if let Some(target) = &self.target {
            for (offset, data) in deferred {
                write_at(target, offset, &data);
            }
        }
    }

    /// One of the requests' servers has answered its part; with the last, the op finishes.
    fn part_answered(&self) {
        if self.remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.release_target();
            // Under `finished`'s lock: an early pull's op installs its completion under it.
            let mut finished = self.finished.lock();
            *finished = true;
            if let Some(done) = self.done.lock().take() {
                self.finish(done);
            }
            self.wake.notify_all();
        }
    }

    fn new(parts: usize, done: Option<OpDone>, target: Option<NDArray>) -> Arc<Pending> {
        Arc::new(Pending::unshared(parts, done, target))
    }

    fn unshared(parts: usize, done: Option<OpDone>, target: Option<NDArray>) -> Pending {
        // A request to no server is finished at once (an unfinished completion fails its op).
        let done = match done {
            Some(d) if parts == 0 => {
                d.finish(Ok(()));
                None
            }
            d => d,
        };
        Pending {
            remaining: AtomicUsize::new(parts),
            done: Mutex::new(done),
            target,
            errors: Mutex::new(Vec::new()),
            answers: Mutex::new(Vec::new()),
            finished: Mutex::new(parts == 0),
            wake: Condvar::new(),
            early: None,
            landing: Mutex::new(None),
            deferred: Mutex::new(Vec::new()),
        }
    }

    /// Finishes `done` with the servers' errors, if any.
    fn finish(&self, done: OpDone) {
        let errors = self.errors.lock();
        done.finish(if errors.is_empty() { Ok(()) } else { Err(crate::Error::new(format!("a server failed: {}", errors.join("; ")))) });
    }

    /// Hands the op's completion to a request that may have finished already (an early
    /// pull's answers can arrive before its op runs).
    fn complete_with(&self, done: OpDone) {
        if let (Some(early), Some(target)) = (&self.early, &self.target) {
            // Writable once nothing is kept: until then no body is placed into the target, so
            // these writes never wait for one.
            loop {
                let kept = {
                    let mut e = early.lock();
                    if e.kept.is_empty() {
                        e.writable = true;
                        break;
                    }
                    std::mem::take(&mut e.kept)
                };
                for (offset, data) in kept {
                    write_at(target, offset, &data);
                }
            }
        }
        let finished = self.finished.lock();
        if *finished {
            drop(finished);
            self.finish(done);
        } else {
            *self.done.lock() = Some(done);
        }
    }

    fn wait(&self) {
        let mut f = self.finished.lock();
        while !*f {
            self.wake.wait(&mut f);
        }
    }
}

/// A request sent to a server and not yet answered.
struct Asked {
    pending: Arc<Pending>,
    /// Where in the target the answer goes.
    offset: usize,
    /// The server's world rank.
    server: usize,
    what: What,
    /// A pull's bytes not yet answered: a pull answered in pieces (`ReplyPart`, one per
    /// chunk of a part the server streams) is answered when they have all come.
    left: usize,
    /// The lengths of the answers' bodies being received into the target, in arrival order.
    placed: VecDeque<usize>,
    /// The partner's request this one's answer also answers (a paired or forwarded push).
    relay: Option<Relay>,
}

/// A partner's request that a request's answer also answers (`pairs`).
#[derive(Clone, Copy)]
struct Relay {
    /// The partner's world rank.
    dest: usize,
    req: u64,
    /// The partner's push wants the value back (a push-pull).
    want_value: bool,
}

/// Request ids of the partner's pieces this worker forwards alone: the partner's id with the
/// top bit set (a worker's own ids never reach it).
const FORWARDED: u64 = 1 << 63;

impl Asked {
    fn new(pending: &Arc<Pending>, offset: usize, server: usize, what: What) -> Asked {
        Asked { pending: Arc::clone(pending), offset, server, what, left: 0, placed: VecDeque::new(), relay: None }
    }

    /// A pull of `bytes` bytes.
    fn pulling(self, bytes: usize) -> Asked {
        Asked { left: bytes, ..self }
    }
}

/// The requests of a worker awaiting answers, by request id.
type PendingMap = Arc<Mutex<HashMap<u64, Asked>>>;

struct State {
    keys: HashMap<i32, KeyParts>,
    /// Where the keys inited so far are; the same on every worker (checked at barriers).
    balance: Balance,
    barrier_before_exit: bool,
    /// dist_async: every server has answered that it has an updater.
    servers_update: bool,
    /// Which partner owns the parts inited so far (`pairs`).
    owners: Owners,
}

/// A worker process's store.
pub struct Worker {
    node: Arc<Node>,
    mode: DistMode,
    /// Rank among the workers.
    rank: usize,
    num_workers: usize,
    /// World ranks of the servers, by server rank.
    servers: Vec<usize>,
    bound: usize,
    /// `KVSTORE_DIST_CHUNK_BYTES`: big parts of sync pushes go in chunks of this size.
    chunk_bytes: usize,
    state: Mutex<State>,
    pending: PendingMap,
    next_req: AtomicU64,
    /// Per dense key: the pushes scheduled so far (init pushes aside), which a pull names
    /// (`PullAfter`).
    pushes: Mutex<HashMap<i32, Pushes>>,
    /// The exit protocol has run.
    shut_down: std::sync::atomic::AtomicBool,
    /// Whether workers 0 and 1 pair in this job (`pairs`; every worker knows).
    pairs_on: bool,
    /// This worker's side of the pair, on workers 0 and 1 when they pair.
    pairing: Option<Arc<Pairing>>,
}

impl Worker {
    /// Joins the job: the all-node barrier of MXNet's worker constructor; then rank 0 puts the
    /// servers in sync mode unless the name says `_async`.
    pub fn start(node: Arc<Node>, mode: DistMode) -> Result<Worker> {
        let workers = node.ranks_of(Role::Worker);
        let servers = node.ranks_of(Role::Server);
        let balance = Balance::from_env(servers.len());
        crate::ensure!(!servers.is_empty(), "a distributed store needs at least one server process (DMLC_ROLE=server) in the MPI job");
        let rank = workers.iter().position(|&r| r == node.rank).unwrap_or(0);
        let pending: PendingMap = Arc::new(Mutex::new(HashMap::new()));
        let apart = workers.len() >= 2 && servers.iter().all(|&s| workers[..2].iter().all(|&w| node.host(w) != node.host(s)));
        let pairs_on = pairs::enabled(mode.sync, workers.len(), servers.len(), apart)?;
        let pairing = (pairs_on && rank < 2).then(|| Arc::new(Pairing::new(rank, workers[rank ^ 1])));
        let inbox = Inbox { pending: Arc::clone(&pending), node: Arc::downgrade(&node), pairing: pairing.clone() };
        node.set_handler(Arc::new(move |source, bytes| inbox.handle(source, bytes)));
        if let Some(pairing) = &pairing {
            // A partner's sends to its servers wait on its partner's pieces and are queued
            // after its own pieces to the partner: kept in the order queued, they would leave
            // only once those have.
            node.set_bulk_lead(0);
            // The own pieces held for the partner's are owed by the partner.
            let (weak, partner) = (Arc::downgrade(pairing), pairing.partner);
            node.watch.add_source(Box::new(move |out: &mut Vec<Owe>| {
                if let Some(p) = weak.upgrade() {
                    out.extend(p.waiting().into_iter().map(|key| Owe { peer: partner, what: What::Push { key, pull: false } }));
                }
            }));
        }
        node.set_placement(Arc::new(Answers { pending: Arc::clone(&pending) }));
        // The monitor sees every unanswered request as owed by its server.
        let weak = Arc::downgrade(&pending);
        node.watch.add_source(Box::new(move |out: &mut Vec<Owe>| {
            if let Some(map) = weak.upgrade() {
                out.extend(map.lock().values().map(|a| Owe { peer: a.server, what: a.what.clone() }));
            }
        }));
        let name = match (mode.sync, mode.device) {
            (false, _) => "dist_async",
            (true, true) => "dist_device_sync",
            (true, false) => "dist_sync",
        };
        node.watch.set_label(format!("{name} worker {rank}"));
        let worker = Worker {
            num_workers: workers.len(),
            node,
            mode,
            rank,
            servers,
            bound: shard::bigarray_bound(),
            chunk_bytes: shard::chunk_bytes(),
            state: Mutex::new(State {
                keys: HashMap::new(),
                balance,
                barrier_before_exit: true,
                servers_update: false,
                owners: Owners::default(),
            }),
            pending,
            next_req: AtomicU64::new(1),
            pushes: Mutex::new(HashMap::new()),
            shut_down: std::sync::atomic::AtomicBool::new(false),
            pairs_on,
            pairing,
        };
        worker.node.barrier_all("at the start");
        if mode.sync && rank == 0 {
            worker.send_command(Command::SyncMode.id(), b"")?;
        }
        Ok(worker)
    }

    /// Rank among the workers.
    pub fn rank(&self) -> i32 {
        self.rank as i32
    }

    /// Number of workers.
    pub fn group_size(&self) -> i32 {
        self.num_workers as i32
    }

    fn sum_order(&self) -> SumOrder {
        if self.mode.device {
            SumOrder::Serial
        } else {
            SumOrder::CpuComm
        }
    }

    /// The store's mode, from its name.
    pub fn mode(&self) -> DistMode {
        self.mode
    }

    /// Registers a request to each of `dests` (world ranks).
    fn register(&self, pending: &Arc<Pending>, dests: &[usize], what: &What) -> Vec<u64> {
        let mut map = self.pending.lock();
        dests
            .iter()
            .map(|&dest| {
                let req = self.next_req.fetch_add(1, Ordering::Relaxed);
                map.insert(req, Asked::new(pending, 0, dest, what.clone()));
                req
            })
            .collect()
    }

    /// Sends a request (`encode(req)`) to each of `dests` (world ranks) and waits for every
    /// answer (`what`: the request, for the monitor's message).
    fn ask(&self, dests: &[usize], what: What, encode: impl Fn(u64) -> Vec<u8>) -> Arc<Pending> {
        let pending = Pending::new(dests.len(), None, None);
        let reqs = self.register(&pending, dests, &what);
        for (&dest, req) in dests.iter().zip(reqs) {
            self.node.send(dest, &encode(req));
        }
        pending.wait();
        pending
    }

    /// Sends command `id` to every server and waits for all of them to have handled it.
    pub fn send_command(&self, id: i32, body: &[u8]) -> Result<()> {
        let pending = self.ask(&self.servers, What::Command { id }, |req| wire::encode(&Msg::Command { req, id, body }));
        let errors = pending.errors.lock();
        crate::ensure!(errors.is_empty(), "a server failed command {id}: {}", errors.join("; "));
        Ok(())
    }

    /// dist_async: refuses pushes until every server has an updater (MXNet's servers abort).
    pub fn check_servers_update(&self) -> Result<()> {
        if self.mode.sync || self.state.lock().servers_update {
            return Ok(());
        }
        let pending = self.ask(&self.servers, What::Request("the query whether it has an updater"), |req| wire::encode(&Msg::HasUpdater { req }));
        let all = pending.answers.lock().iter().all(|a| a.first() == Some(&1));
        crate::ensure!(
            all,
            "dist_async pushes need an updater on every server (set the optimizer first): the servers would have nothing to apply the push with"
        );
        self.state.lock().servers_update = true;
        Ok(())
    }

    /// A worker barrier, coordinated by server 0 (`exit`: the exit barrier, which waits for
    /// every worker; a plain one waits for the workers that have not joined).
    /// `placed`: the fingerprint of this worker's key placement, which server 0 checks is
    /// every worker's (0: none, the exit barrier).
    fn barrier_at_server(&self, exit: bool, placed: u64) -> Result<()> {
        let what = What::Request(if exit { "the exit barrier" } else { "the worker barrier" });
        let pending = self.ask(&self.servers[..1], what, |req| wire::encode(&Msg::Barrier { req, exit, placed }));
        let errors = pending.errors.lock();
        crate::ensure!(errors.is_empty(), "the worker barrier failed: {}", errors.join("; "));
        Ok(())
    }

    /// The test hook `push-after-join`: one raw push of this worker's first dense key to its
    /// servers, after the join; prints what the servers answered.
    fn push_after_join(&self) {
        let parts = {
            let state = self.state.lock();
            state.keys.iter().filter(|(_, m)| !m.sparse()).min_by_key(|(k, _)| **k).map(|(k, m)| (*k, m.dtype, m.parts.clone()))
        };
        let Some((key, dtype, parts)) = parts else { return };
        for p in parts {
            let data = vec![0u8; p.len * dtype.size()];
            let pending = self.ask(&[self.servers[p.server]], What::Push { key, pull: false }, |req| {
                wire::encode(&Msg::Push { req, key, dtype: dtype.code(), flags: 0, len: p.len as u64, at: 0, chunk: 0, data: &data })
            });
            let refusal = pending.errors.lock().first().cloned();
            match refusal {
                Some(e) => eprintln!("libkvstore: test push after join: refused: {e}"),
                None => eprintln!("libkvstore: test push after join: ACCEPTED by server {}", p.server),
            }
        }
    }

    /// Tells every server that this worker has finished (see `members`).
    fn join(&self) -> Result<()> {
        let pending = self.ask(&self.servers, What::Request("the join"), |req| wire::encode(&Msg::Join { req }));
        let errors = pending.errors.lock();
        crate::ensure!(errors.is_empty(), "a server refused the join: {}", errors.join("; "));
        Ok(())
    }

    /// Schedules the push of one key's values: sum, compress, send each part; the op
    /// finishes when every server has answered (with `PUSH_PULL`, its answers fill `comm`).
    #[allow(clippy::too_many_arguments)]
    fn schedule_push(
        &self,
        key: i32,
        values: Vec<NDArray>,
        comm: &NDArray,
        parts: &[Part],
        compression: Option<GradientCompression>,
        flags: u8,
        priority: i32,
        residual: Arc<Mutex<Vec<f32>>>,
        owned: &[bool],
    ) {
        // GPU values reach the wire through pinned host copies.
        let values = match crate::backend::host_readable(values, priority) {
            Ok(v) => v,
            Err(e) => return engine().push(&[], &[comm.var()], priority, move |_| Err(e)),
        };
        let held = values.clone();
        let reads: Vec<crate::engine::Var> = held.iter().map(|v| v.var()).collect();
        // A big part of a sync round goes in chunks (not a compressed or init push), so that
        // its server sums and answers each chunk while the next is on the wire (`chunks`).
        let esz = values.first().map_or(1, |v| v.dtype().size());
        let chunked = self.mode.sync && compression.is_none() && flags & wire::PUSH_INIT == 0 && self.chunk_bytes > 0;
        let pieces = shard::pieces(parts, if chunked { (self.chunk_bytes / esz).max(1) } else { 0 });
        let (node, servers, parts) = (Arc::clone(&self.node), self.servers.clone(), parts.to_vec());
        let pending_map = Arc::clone(&self.pending);
        let next_req = self.next_req.fetch_add(pieces.len() as u64, Ordering::Relaxed);
        let order = self.sum_order();
        let target = comm.clone();
        let delay = super::failpoint::push_delay(self.rank);
        let counted = flags & wire::PUSH_INIT == 0;
        let leaves_value = flags & wire::PUSH_PULL == 0;
        let var = comm.var();
        // A sync push of a paired key goes through the pair (`pairs`): the key's push number,
        // which the partner's piece of the same push carries too.
        let paired = match &self.pairing {
            Some(p) if chunked && counted && !owned.is_empty() => Some((Arc::clone(p), owned.to_vec())),
            _ => None,
        };
        let n = self.pushes.lock().get(&key).map_or(0, |p| p.count) + 1;
        engine().push_async(&reads, &[var], priority, move |_env, done| {
            std::thread::sleep(delay);
            let kernels = byte_kernels();
            let dtype = values[0].dtype();
            let want_data = flags & wire::PUSH_PULL != 0;
            // What the pieces are cut from: the one value, or the sum of several (an array of
            // its own, so that its pieces too can be sent in place).
            let source = match values.len() {
                1 => values[0].clone(),
                _ => match NDArray::zeros(&[values[0].size()], crate::ndarray::Context::cpu(0), dtype) {
                    Ok(sum) => {
                        let views: Vec<_> = values.iter().map(|v| v.read_view()).collect();
                        let srcs: Vec<&[u8]> = views.iter().map(|v| v.bytes()).collect();
                        kernels.sum(dtype, order, sum.write_view().bytes_mut(), &srcs, 1);
                        sum
                    }
                    Err(e) => return done.finish(Err(e)),
                },
            };
            let pending = Pending::new(pieces.len(), Some(done), want_data.then_some(target));
            // Where each piece goes: to its server, or through the pair.
            let routes: Vec<Route> = pieces
                .iter()
                .map(|c| match &paired {
                    None => Route::Server,
                    Some((_, owned)) if owned[c.part] => Route::Own,
                    Some((pairing, _)) if pairing.partner_gone() => Route::Server,
                    Some(_) => Route::Partner,
                })
                .collect();
            {
                let mut map = pending_map.lock();
                let what = What::Push { key, pull: want_data };
                for (i, c) in pieces.iter().enumerate() {
                    let p = &parts[c.part];
                    let dest = match (&routes[i], &paired) {
                        (Route::Partner, Some((pairing, _))) => pairing.partner,
                        _ => servers[p.server],
                    };
                    map.insert(next_req + i as u64, Asked::new(&pending, (p.offset + c.at) * esz, dest, what.clone()));
                }
            }
            // Compressed pushes go whole (`chunked` is off), packed into their messages.
            if let Some(gc) = compression {
                let send_packed = |merged: &[u8]| {
                    let mut residual = residual.lock();
                    if residual.len() != merged.len() / 4 {
                        *residual = vec![0.0; merged.len() / 4];
                    }
                    for (i, c) in pieces.iter().enumerate() {
                        let p = &parts[c.part];
                        let span = wire::Span { len: p.len as u64, at: c.at as u64, chunk: c.chunk as u64 };
                        let (first, end) = (p.offset + c.at, p.offset + c.at + c.len);
                        let grad: &[f32] = crate::base::buffer::typed(&merged[first * esz..end * esz]);
                        let mut packed = vec![0u8; gc.packed_bytes(c.len)];
                        kernels.compress(&gc, grad, &mut residual[first..end], &mut packed);
                        let mut m = wire::push_header(next_req + i as u64, key, dtype.code(), flags, span, packed.len());
                        m.extend_from_slice(&packed);
                        node.send_owned(servers[p.server], m, false);
                    }
                };
                return source.read_bytes(send_packed);
            }
            // Each piece goes from the source's own memory (the op holds a pushed value for
            // reading until every server has answered), without a copy into its message
            // where the transport can send in place.
            for (i, c) in pieces.iter().enumerate() {
                let p = &parts[c.part];
                let span = wire::Span { len: p.len as u64, at: c.at as u64, chunk: c.chunk as u64 };
                let (first, end) = (p.offset + c.at, p.offset + c.at + c.len);
                let (req, body) = (next_req + i as u64, Body::new(&source, first * esz..end * esz));
                match (&routes[i], &paired) {
                    (Route::Own, Some((pairing, _))) => {
                        let piece = Piece { req, key, dtype: dtype.code(), flags, n, offset: first as u64, server: servers[p.server], span };
                        run_step(&node, &pending_map, pairing.partner, pairing.own(OwnPiece { piece, body }));
                    }
                    (Route::Partner, Some((pairing, _))) => {
                        let head = wire::pair_push_header(req, key, dtype.code(), flags, n, first as u64, servers[p.server] as u64, span, 0);
                        node.send_parts(pairing.partner, head, body, false);
                    }
                    _ => node.send_parts(servers[p.server], wire::push_header(req, key, dtype.code(), flags, span, 0), body, false),
                }
            }
        });
        if counted {
            // Counted here, in call order, once the push is sure to reach its servers. The
            // store's calls are serialised, so no other op on the value comes in between.
            let clear_after = if leaves_value { engine().ops_on(var) } else { None };
            let mut pushes = self.pushes.lock();
            let p = pushes.entry(key).or_default();
            p.count += 1;
            p.clear_after = clear_after;
        }
    }

    /// Schedules the push of one row_sparse key's values: their sum (over the union of rows),
    /// then, to each server of the key, only the pushed rows in its range (ids relative to the
    /// range). A server gets a message even when none of its rows were pushed: in sync mode
    /// every push counts toward the round. Finishes when every server has answered.
    fn schedule_rsp_push(&self, key: i32, values: Vec<NDArray>, comm: &NDArray, parts: &[RowPart], flags: u8, priority: i32) {
        let held = values.clone();
        let reads: Vec<crate::engine::Var> = held.iter().map(|v| v.var()).collect();
        let (node, servers, parts) = (Arc::clone(&self.node), self.servers.clone(), parts.to_vec());
        let pending_map = Arc::clone(&self.pending);
        let next_req = self.next_req.fetch_add(parts.len() as u64, Ordering::Relaxed);
        let delay = super::failpoint::push_delay(self.rank);
        engine().push_async(&reads, &[comm.var()], priority, move |_env, done| {
            std::thread::sleep(delay);
            let dtype = values[0].dtype();
            let row_bytes = values[0].row_bytes();
            let row_len = values[0].row_len();
            let summed = || -> Result<(Vec<i64>, Vec<u8>)> {
                if values.len() == 1 {
                    let r = values[0].rows_now()?;
                    return Ok((r.ids, r.data));
                }
                let rows = values.iter().map(|v| v.rows_now()).collect::<Result<Vec<_>>>()?;
                let inputs: Vec<(&[i64], &[u8])> = rows.iter().map(|r| (r.ids.as_slice(), r.data.as_slice())).collect();
                let (ids, buf) = byte_kernels().sum_rows(dtype, row_bytes, &inputs)?;
                Ok((ids, buf.bytes().to_vec()))
            };
            let (ids, data) = match summed() {
                Ok(rows) => rows,
                // The failure reaches the next wait on the key's buffer.
                Err(e) => return done.finish(Err(e)),
            };
            let pending = Pending::new(parts.len(), Some(done), None);
            {
                let mut map = pending_map.lock();
                for (i, p) in parts.iter().enumerate() {
                    map.insert(next_req + i as u64, Asked::new(&pending, 0, servers[p.server], What::RowSparsePush { key }));
                }
            }
            for (i, p) in parts.iter().enumerate() {
                let (lo, hi) = (p.start as i64, (p.start + p.rows) as i64);
                let first = ids.partition_point(|&r| r < lo);
                let last = ids.partition_point(|&r| r < hi);
                let rel: Vec<i64> = ids[first..last].iter().map(|&r| r - lo).collect();
                let rows = &data[first * row_bytes..last * row_bytes];
                let mut m = wire::rsp_push_header(next_req + i as u64, key, dtype.code(), flags, p.rows as u64, row_len as u64, &rel, rows.len());
                m.extend_from_slice(rows);
                node.send_owned(servers[p.server], m, false);
            }
        });
    }

    fn schedule_rsp_pull(&self, key: i32, comm: &NDArray, rid: &NDArray, parts: &[RowPart], priority: i32) {
        let (node, servers, parts) = (Arc::clone(&self.node), self.servers.clone(), parts.to_vec());
        let pending_map = Arc::clone(&self.pending);
        let next_req = self.next_req.fetch_add(parts.len() as u64, Ordering::Relaxed);
        let (target, ids_in) = (comm.clone(), rid.clone());
        engine().push_async(&[rid.var()], &[comm.var()], priority, move |_env, done| {
            let mut want = match ids_in.read_bytes(|b| crate::ndarray::row_ids_of(ids_in.dtype(), b, ids_in.size())) {
                Ok(ids) => ids,
                Err(e) => return done.finish(Err(e)),
            };
            want.sort_unstable();
            want.dedup();
            let row_bytes = target.row_bytes();
            let rows = match crate::base::buffer::Buffer::zeroed(want.len() * row_bytes) {
                Ok(b) => b,
                Err(e) => {
                    eprintln!("libkvstore: row_sparse pull of key {key} failed: {e}");
                    return;
                }
            };
            if let Err(e) = target.set_rows_now(&want, rows) {
                eprintln!("libkvstore: row_sparse pull of key {key} failed: {e}");
                return;
            }
            // Each server answers its rows in order, into their place in the output.
            let asks: Vec<(usize, usize, Vec<i64>)> = parts
                .iter()
                .map(|p| {
                    let (lo, hi) = (p.start as i64, (p.start + p.rows) as i64);
                    let first = want.partition_point(|&r| r < lo);
                    let last = want.partition_point(|&r| r < hi);
                    (p.server, first * row_bytes, want[first..last].iter().map(|&r| r - lo).collect::<Vec<i64>>())
                })
                .filter(|(_, _, ids)| !ids.is_empty())
                .collect();
            let pending = Pending::new(asks.len(), Some(done), Some(target));
            {
                let mut map = pending_map.lock();
                for (i, (server, offset, _)) in asks.iter().enumerate() {
                    map.insert(next_req + i as u64, Asked::new(&pending, *offset, servers[*server], What::RowSparsePull { key }));
                }
            }
            for (i, (server, _, ids)) in asks.into_iter().enumerate() {
                // Express: the engine ran this pull after the key's push was answered.
                node.send_owned(servers[server], wire::encode(&Msg::RspPull { req: next_req + i as u64, key, ids }), true);
            }
        });
    }

    /// Schedules a pull of a dense key. It is sent at once, naming the last push of the key
    /// this worker scheduled (`PullAfter`): each server answers it once that push has reached
    /// it and the push's sync round has been applied (at once after a push in async mode), so
    /// the value leaves as soon as the round completes instead of after the push's answer
    /// and a pull request's round trip, both behind megabytes of other keys on the same links.
    /// The value is the one a pull sent after the push's answer would get. The op still runs
    /// after the push's op and the target's earlier writers (engine order) and only waits for
    /// the answers; one that arrives before the op starts is kept and written when it starts,
    /// unless the pull comes right after a push that leaves the target alone ([`Pushes`]).
    fn schedule_pull(&self, key: i32, comm: &NDArray, parts: &[Part], owned: &[bool], priority: i32) {
        let (node, servers, parts) = (Arc::clone(&self.node), self.servers.clone(), parts.to_vec());
        let pending_map = Arc::clone(&self.pending);
        let next_req = self.next_req.fetch_add(parts.len() as u64, Ordering::Relaxed);
        let target = comm.clone();
        let ops = engine().ops_on(comm.var());
        let (after, writable) = match self.pushes.lock().get(&key) {
            Some(p) => (p.count, p.clear_after.is_some() && p.clear_after == ops),
            None => (0, false),
        };
        if after > 0 && !parts.is_empty() {
            // The parts this worker owns it pulls for its partner too (`pairs`).
            let relays = self.pairing.as_ref().is_some_and(|p| !p.partner_gone());
            let esz = target.dtype().size();
            let pending = Pending::ahead(parts.len(), target, writable);
            {
                let mut map = pending_map.lock();
                for (i, p) in parts.iter().enumerate() {
                    map.insert(next_req + i as u64, Asked::new(&pending, p.offset * esz, servers[p.server], What::Pull { key }).pulling(p.len * esz));
                }
            }
            for (i, p) in parts.iter().enumerate() {
                // Express: the server orders it after the push it names.
                let relay = relays && owned.get(i) == Some(&true);
                node.send_owned(servers[p.server], wire::encode(&Msg::PullAfter { req: next_req + i as u64, key, after, relay }), true);
            }
            return engine().push_async(&[], &[comm.var()], priority, move |_env, done| pending.complete_with(done));
        }
        engine().push_async(&[], &[comm.var()], priority, move |_env, done| {
            let esz = target.dtype().size();
            let pending = Pending::new(parts.len(), Some(done), Some(target));
            {
                let mut map = pending_map.lock();
                for (i, p) in parts.iter().enumerate() {
                    map.insert(next_req + i as u64, Asked::new(&pending, p.offset * esz, servers[p.server], What::Pull { key }).pulling(p.len * esz));
                }
            }
            for (i, p) in parts.iter().enumerate() {
                // Express: the engine runs a pull after the key's push was answered, so it may
                // overtake the other keys' pushes still queued for this server (push and pull
                // overlap on the full-duplex link).
                node.send_owned(servers[p.server], wire::encode(&Msg::Pull { req: next_req + i as u64, key }), true);
            }
        });
    }

    /// Worker 0 forwards gradient compression to the servers.
    pub fn set_gradient_compression(&self, gc: &GradientCompression) -> Result<()> {
        if self.rank == 0 {
            self.send_command(Command::SetGradientCompression.id(), encode_compression(gc).as_bytes())?;
        }
        Ok(())
    }

    /// A barrier over the workers that have not joined (it does not wait for pending
    /// pushes and pulls).
    pub fn barrier(&self) -> Result<()> {
        let placed = self.state.lock().balance.fingerprint();
        self.barrier_at_server(false, placed)
    }

    /// Whether freeing the store waits at a barrier first (and then stops the servers).
    pub fn set_barrier_before_exit(&self, barrier: bool) {
        self.state.lock().barrier_before_exit = barrier;
    }

    /// MXNet's worker destructor: wait for pending work; join (the other workers' sync rounds
    /// and barriers go on without this one); with the exit barrier, wait there for every
    /// worker — as long as the others still train —, then worker 0 stops the servers, then
    /// the all-node barrier of ps-lite's finalize (bounded by the exit watchdog).
    /// Runs once: later calls (a Free after MXNotifyShutdown ran it) return at once.
    pub fn shutdown(&self) {
        if self.shut_down.swap(true, Ordering::SeqCst) {
            return;
        }
        if let Some(pairing) = &self.pairing {
            // Before waiting for the last pushes: none of them may wait for the partner's
            // pieces, which may never come (see `pairs`).
            self.node.send_owned(pairing.partner, wire::encode(&Msg::PairLeave), false);
            for step in pairing.leave() {
                run_step(&self.node, &self.pending, pairing.partner, step);
            }
        }
        // A failure of pending work has no caller left to report to at exit.
        let _ = engine().wait_all();
        if let Err(e) = self.join() {
            eprintln!("libkvstore: {e}");
        }
        if super::failpoint::push_after_join() {
            self.push_after_join();
        }
        let barrier = self.state.lock().barrier_before_exit;
        if barrier {
            if let Err(e) = self.barrier_at_server(true, 0) {
                eprintln!("libkvstore: {e}");
            }
        }
        let watchdog = super::exit_watchdog("worker exit", &self.node);
        if barrier {
            if self.rank == 0 {
                if let Err(e) = self.send_command(Command::StopServer.id(), b"") {
                    eprintln!("libkvstore: stopping the servers failed: {e}");
                }
            }
            self.node.barrier_all("at exit");
        }
        self.node.finalize();
        drop(watchdog);
    }
}

impl Worker {
    /// How key `id` of `value` is spread over the servers by MXNet's rule (a small key's
    /// server is then chosen by [`Worker::place`]).
    fn shard(&self, id: i32, value: &NDArray, compression: Option<GradientCompression>) -> KeyParts {
        let residual = Arc::new(Mutex::new(Vec::new()));
        if value.stype() == StorageType::RowSparse {
            let row_parts = shard::row_parts(id, value.shape()[0], value.row_len(), self.servers.len(), self.bound);
            return KeyParts { dtype: value.dtype(), parts: Vec::new(), residual, row_parts, owned: Vec::new() };
        }
        let n = value.size();
        let parts = match compression {
            Some(gc) => {
                let factor = if gc.packed_bytes(16) == 4 { 16 } else { 32 };
                shard::compressed_parts(id, n, gc.packed_bytes(n) / 4, factor, self.servers.len(), self.bound).1
            }
            None => shard::dense_parts(id, n, self.servers.len(), self.bound),
        };
        KeyParts { dtype: value.dtype(), parts, residual, row_parts: Vec::new(), owned: Vec::new() }
    }

    /// Worker 0's init: every row_sparse value has every row of each server's part (MXNet's
    /// servers abort on an init that gives them no rows, and keep an init's rows as the
    /// part's first rows, so that pushes and pulls of the others miss; one check refuses
    /// both), then every value is sent and answered.
    fn send_inits(&self, inits: &[(i32, NDArray, NDArray)], shards: &[KeyParts]) -> Result<()> {
        for ((id, v, _), k) in inits.iter().zip(shards) {
            if !k.sparse() {
                continue;
            }
            let have = engine().run_sync(&[v.var()], &[], || v.rows_now().map(|r| r.ids))??;
            for p in &k.row_parts {
                let got = have.iter().filter(|&&r| r >= p.start as i64 && r < (p.start + p.rows) as i64).count();
                crate::ensure!(
                    got == p.rows,
                    "row_sparse key {id}: the init value has {got} of the {} rows {}..{} (server {}'s part); a distributed store's row_sparse key is inited with every row (zero rows included)",
                    p.rows,
                    p.start,
                    p.start + p.rows,
                    p.server
                );
            }
        }
        for ((id, value, stored), k) in inits.iter().zip(shards) {
            if k.sparse() {
                self.schedule_rsp_push(*id, vec![value.clone()], stored, &k.row_parts, wire::PUSH_INIT, 0);
            } else {
                self.schedule_push(*id, vec![value.clone()], stored, &k.parts, None, wire::PUSH_INIT, 0, Arc::new(Mutex::new(Vec::new())), &[]);
            }
        }
        let mut failed = Ok(());
        for (_, _, stored) in inits {
            failed = failed.and(stored.wait_to_write());
        }
        failed
    }

    /// Places the small keys of one init call after the keys of the earlier calls
    /// (`balance`, updated), rewriting their parts' servers.
    fn place(&self, balance: &mut Balance, inits: &[(i32, NDArray, NDArray)], shards: &mut [KeyParts]) {
        let loads: Vec<(i32, Load)> = inits
            .iter()
            .zip(shards.iter())
            .map(|((id, v, _), k)| {
                let esz = k.dtype.size() as u64;
                let load = if k.sparse() {
                    Load::Uncounted(v.shape().iter().product::<usize>() as u64 * esz)
                } else if v.size() < self.bound {
                    Load::Small(v.size() as u64 * esz)
                } else {
                    let mut per = vec![0; self.servers.len()];
                    for p in &k.parts {
                        per[p.server] += p.len as u64 * esz;
                    }
                    Load::Split(per)
                };
                (*id, load)
            })
            .collect();
        for (k, server) in shards.iter_mut().zip(balance.place(&loads)) {
            if let (Some(server), [part]) = (server, k.parts.as_mut_slice()) {
                part.server = server;
            }
        }
    }

    /// A key's parts (the store has checked that it was initialised).
    fn parts_of(&self, id: i32) -> Option<KeyParts> {
        self.state.lock().keys.get(&id).cloned()
    }
}

impl Servers for Worker {
    /// Worker 0 sends the values, as MXNet's `InitImpl`; then a barrier of all workers,
    /// reached even when worker 0's init failed (the others wait there, and then fail too),
    /// where server 0 checks that every worker placed the keys alike.
    fn init(&self, inits: &[(i32, NDArray, NDArray)], compression: Option<GradientCompression>) -> Result<()> {
        let mut shards: Vec<KeyParts> = inits.iter().map(|(id, v, _)| self.shard(*id, v, compression)).collect();
        let (mut balance, mut owners) = {
            let state = self.state.lock();
            (state.balance.clone(), state.owners.clone())
        };
        self.place(&mut balance, inits, &mut shards);
        if let Some(pairing) = &self.pairing {
            for k in shards.iter_mut().filter(|k| !k.sparse() && k.dtype == DType::Float32) {
                k.owned = k.parts.iter().map(|p| owners.assign(p.len as u64 * 4) == pairing.index).collect();
            }
        }
        let sent = if self.rank == 0 { self.send_inits(inits, &shards) } else { Ok(()) };
        // Every worker must agree on pairing too (a worker 0 pairing with a worker 1 that
        // does not would wait for its pieces forever).
        let placed = match (&sent, self.pairs_on) {
            (Err(_), _) => wire::INIT_REFUSED,
            (Ok(()), false) => balance.fingerprint(),
            (Ok(()), true) => balance.fingerprint().rotate_left(1).clamp(1, u64::MAX - 1),
        };
        let reached = self.barrier_at_server(false, placed);
        sent.and(reached)?;
        let mut state = self.state.lock();
        state.balance = balance;
        state.owners = owners;
        for ((id, _, _), k) in inits.iter().zip(shards) {
            state.keys.insert(*id, k);
        }
        Ok(())
    }

    fn push(&self, jobs: Vec<(i32, Vec<NDArray>, NDArray)>, compression: Option<GradientCompression>, fetch_back: bool, priority: i32) {
        for (id, values, stored) in jobs {
            let Some(k) = self.parts_of(id) else { continue };
            if k.sparse() {
                self.schedule_rsp_push(id, values, &stored, &k.row_parts, 0, priority);
                continue;
            }
            let flags = match (fetch_back, compression) {
                (true, _) => wire::PUSH_PULL,
                (false, Some(_)) => wire::PUSH_COMPRESSED,
                (false, None) => 0,
            };
            let compression = compression.filter(|_| !fetch_back);
            self.schedule_push(id, values, &stored, &k.parts, compression, flags, priority, k.residual, &k.owned);
        }
    }

    fn fetch(&self, id: i32, stored: &NDArray, priority: i32) {
        if let Some(k) = self.parts_of(id) {
            self.schedule_pull(id, stored, &k.parts, &k.owned, priority);
        }
    }

    fn fetch_rows(&self, id: i32, stored: &NDArray, row_ids: &NDArray, priority: i32) -> Result<()> {
        if let Some(k) = self.parts_of(id) {
            self.schedule_rsp_pull(id, stored, row_ids, &k.row_parts, priority);
        }
        Ok(())
    }
}

/// Copies answered bytes into `target` at byte `offset`.
fn write_at(target: &NDArray, offset: usize, data: &[u8]) {
    target.write_bytes(|b| match b.get_mut(offset..offset + data.len()) {
        Some(dst) => dst.copy_from_slice(data),
        None => eprintln!("libkvstore: a server answered {} bytes at offset {offset} of a {}-byte value", data.len(), b.len()),
    });
}

/// Counts the answered bytes of request `req` (`len` of its entry; `whole`: its only answer):
/// its pending request, where in the target they go, whether the request is now answered
/// (then it is no longer awaited), and the partner's request it also answers.
fn answered(
    pending: &Mutex<HashMap<u64, Asked>>,
    req: u64,
    whole: bool,
    len: impl FnOnce(&mut Asked) -> usize,
) -> Option<(Arc<Pending>, usize, bool, Option<Relay>)> {
    let mut map = pending.lock();
    let asked = map.get_mut(&req)?;
    let len = len(asked);
    asked.left = asked.left.saturating_sub(len);
    let (p, offset, last, relay) = (Arc::clone(&asked.pending), asked.offset, whole || asked.left == 0, asked.relay);
    if last {
        map.remove(&req);
    }
    Some((p, offset, last, relay))
}

/// Where a piece of a push goes (see `pairs`).
enum Route {
    /// To its server.
    Server,
    /// Through this worker's pair, which it owns.
    Own,
    /// To the partner, which owns it.
    Partner,
}

/// Carries out a pairing step (see `pairs`).
fn run_step(node: &Node, pending: &Mutex<HashMap<u64, Asked>>, partner: usize, step: Step) {
    match step {
        Step::Hold => {}
        Step::Alone(own) => {
            let p = &own.piece;
            node.send_parts(p.server, wire::push_header(p.req, p.key, p.dtype, p.flags, p.span, 0), own.body, false);
        }
        Step::Pair(own, theirs) => {
            let p = &own.piece;
            let len = theirs.data.len();
            let flags = ((p.flags | theirs.piece.flags) & wire::PUSH_PULL) | wire::PUSH_PAIRED;
            let mut m = wire::push_header(p.req, p.key, p.dtype, flags, p.span, len);
            let start = m.len();
            m.resize(start + len, 0);
            // `w0 + w1` is `w1 + w0`: the first step of the round's rank-order fold.
            let summed = own.body.read(|mine| (mine.len() == len).then(|| pairs::add_f32(&mut m[start..], mine, &theirs.data)));
            if summed.is_none() {
                // Pieces that do not match (never between partners of one job): each alone.
                eprintln!("libkvstore: key {}: the partner's piece of push {} has {len} bytes, this worker's {}; pushed apart", p.key, p.n, own.body.len());
                run_step(node, pending, partner, Step::Forward(theirs));
                return run_step(node, pending, partner, Step::Alone(own));
            }
            let relay = Relay { dest: partner, req: theirs.piece.req, want_value: theirs.piece.flags & wire::PUSH_PULL != 0 };
            if let Some(asked) = pending.lock().get_mut(&p.req) {
                asked.relay = Some(relay);
            }
            node.send_owned(p.server, m, false);
        }
        Step::Forward(theirs) => {
            let p = &theirs.piece;
            let req = FORWARDED | p.req;
            let relay = Relay { dest: partner, req: p.req, want_value: p.flags & wire::PUSH_PULL != 0 };
            let asked = Asked { relay: Some(relay), ..Asked::new(&Pending::new(1, None, None), 0, p.server, What::Push { key: p.key, pull: relay.want_value }) };
            pending.lock().insert(req, asked);
            let flags = (p.flags & wire::PUSH_PULL) | wire::PUSH_FOR_PARTNER;
            let mut m = wire::push_header(req, p.key, p.dtype, flags, p.span, theirs.data.len());
            m.extend_from_slice(&theirs.data);
            node.send_owned(p.server, m, false);
        }
    }
}

/// What a worker's receiver handles: its servers' answers, and its partner's messages
/// (`pairs`).
struct Inbox {
    pending: PendingMap,
    node: std::sync::Weak<Node>,
    pairing: Option<Arc<Pairing>>,
}

impl Inbox {
    fn handle(&self, source: usize, bytes: &[u8]) {
        let msg = match wire::decode(bytes) {
            Ok(m) => m,
            Err(e) => return eprintln!("libkvstore: a worker received a bad message from rank {source}: {e}"),
        };
        let paired = self.pairing.as_ref().zip(self.node.upgrade());
        match msg {
            Msg::Reply { req, ok, data } => self.answer(req, ok, 0, data, true),
            Msg::ReplyPart { req, at, data } => self.answer(req, true, at as usize, data, false),
            Msg::Relay { req, at, whole, partner_req, data } => {
                if let Some((pairing, node)) = &paired {
                    let forward = match whole {
                        true => Msg::Reply { req: partner_req, ok: true, data },
                        false => Msg::ReplyPart { req: partner_req, at, data },
                    };
                    node.send_owned(pairing.partner, wire::encode(&forward), false);
                }
                self.answer(req, true, at as usize, data, whole)
            }
            Msg::PairPush { req, key, dtype, flags, n, offset, server, len, at, chunk, data } => {
                let Some((pairing, node)) = &paired else { return eprintln!("libkvstore: a worker without a partner received a partner's piece; ignored") };
                let piece = Piece { req, key, dtype, flags, n, offset, server: server as usize, span: wire::Span { len, at, chunk } };
                run_step(node, &self.pending, pairing.partner, pairing.theirs(TheirPiece { piece, data: data.to_vec() }));
            }
            Msg::PairLeave => {
                let Some((pairing, node)) = &paired else { return };
                for step in pairing.partner_left() {
                    run_step(node, &self.pending, pairing.partner, step);
                }
            }
            _ => eprintln!("libkvstore: a worker received a message that is not a reply; ignored"),
        }
    }

    /// A server's answer (or the partner's, forwarded): fills the target at the part's
    /// offset, and finishes the request with its last answer. A pull's answer may come in
    /// pieces (`ReplyPart`); its request is answered by the piece that completes it. An
    /// answer that also answers the partner's request is forwarded to it.
    fn answer(&self, req: u64, ok: bool, at: usize, data: &[u8], whole: bool) {
        let Some((p, offset, last, relay)) = answered(&self.pending, req, whole, |_| data.len()) else { return };
        if let (Some(r), Some(node)) = (relay, self.node.upgrade()) {
            let carried = if !ok || r.want_value { data } else { &[] };
            node.send_owned(r.dest, wire::encode(&Msg::Reply { req: r.req, ok, data: carried }), carried.is_empty());
        }
        if !ok {
            p.errors.lock().push(String::from_utf8_lossy(data).into_owned());
        } else if let Some(t) = &p.target {
            if !data.is_empty() {
                p.write(t, offset + at, data);
            }
        } else if relay.is_none() {
            p.answers.lock().push(data.to_vec());
        }
        if last {
            p.part_answered();
        }
    }
}

/// Where the bodies of a worker's answers are received: straight into the pulled array, at
/// the answer's place, once it is writable (see [`Pending::early`]; before, the array may
/// still be read or written by the ops before the pull) and while nothing else holds it.
struct Answers {
    pending: Arc<Mutex<HashMap<u64, Asked>>>,
}

impl Placement for Answers {
    fn place(&self, source: usize, head: &[u8], body_len: usize) -> Option<PlacedAt> {
        let (req, at) = match wire::decode(head).ok()? {
            Msg::ReplyPart { req, at, data: [] } => (req, usize::try_from(at).ok()?),
            Msg::Reply { req, ok: true, data: [] } => (req, 0),
            _ => return None,
        };
        let mut map = self.pending.lock();
        // An answer the partner's request shares comes whole, to be forwarded.
        let asked = map.get_mut(&req).filter(|a| a.server == source && a.relay.is_none())?;
        let p = &asked.pending;
        let target = p.target.as_ref()?;
        if let Some(early) = &p.early {
            if !early.lock().writable {
                return None;
            }
        }
        // Never waits: a whole answer being written holds it.
        let mut landing = p.landing.try_lock()?;
        if landing.is_none() {
            *landing = Some(Landing::hold(target)?);
        }
        let place = landing.as_ref()?.at(asked.offset.checked_add(at)?, body_len)?;
        asked.placed.push_back(body_len);
        Some(place)
    }

    fn placed(&self, _source: usize, head: &[u8]) {
        let (req, whole) = match wire::decode(head) {
            Ok(Msg::ReplyPart { req, .. }) => (req, false),
            Ok(Msg::Reply { req, .. }) => (req, true),
            _ => {
                eprintln!("libkvstore: a worker received a message that is not a reply; ignored");
                return;
            }
        };
        let Some((p, _, last, _)) = answered(&self.pending, req, whole, |a| a.placed.pop_front().unwrap_or(0)) else { return };
        if last {
            p.part_answered();
        }
    }
}
