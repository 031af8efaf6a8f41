//! Distributed stores (`dist`, `dist_sync`, `dist_device_sync`, `dist_sync_device`,
//! `dist_async`): a parameter server over MPI with MXNet 1.9's semantics. The nodes reach each
//! other through a [`transport`]: MPI, in the plugin `libkvstore_mpi.so` loaded at the first
//! distributed store, or an in-process loopback for tests; the roles, sharding, messages,
//! worker and server logic live here.

mod applying;
mod chunks;
pub mod command;
mod failpoint;
pub mod liveness;
mod members;
pub mod names;
mod pairs;
pub mod role;
mod round;
mod server;
pub mod shard;
pub mod transport;
pub mod wire;
mod worker;
#[cfg(test)]
mod tests;

pub use names::{dist_mode, DistMode};
pub use role::{ps_env, Role};

use crate::backend::{GradientCompression, SumOrder};
use crate::error::Result;
use crate::store::{Comm, Rules, Servers, StoreKind, Updaters};
use server::{Scheduler, Server};
use std::ffi::CStr;
use std::sync::Arc;
use transport::Node;
use worker::Worker;

/// A server's controller: `(command id, command body)`, called on the `RunServer` thread.
pub type Controller = Arc<dyn Fn(i32, &CStr) + Send + Sync>;

/// A distributed store, by this process's role.
pub enum DistStore {
    /// A worker's (shared with the process-exit hook, [`shutdown_unfreed_worker`]).
    Worker(Arc<Worker>),
    /// A server's.
    Server(Server),
    /// A scheduler's (joins barriers only).
    Scheduler(Scheduler),
}

impl std::fmt::Debug for DistStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            DistStore::Worker(_) => "DistStore(worker)",
            DistStore::Server(_) => "DistStore(server)",
            DistStore::Scheduler(_) => "DistStore(scheduler)",
        })
    }
}

/// The kernels a worker and a server run on the bytes they send and receive: those of the
/// backend of the store's context, where their values live.
fn byte_kernels() -> &'static dyn crate::backend::ByteKernels {
    crate::backend::for_context(crate::store::STORE_CONTEXT).byte_kernels()
}

/// Checks `DMLC_NUM_WORKER` / `DMLC_NUM_SERVER`, when set, against the MPI job.
fn check_counts(node: &Node) -> Result<()> {
    for (var, role) in [("DMLC_NUM_WORKER", Role::Worker), ("DMLC_NUM_SERVER", Role::Server)] {
        if let Some(n) = role::env_count(var)? {
            let actual = node.ranks_of(role).len();
            crate::ensure!(n == actual, "{var}={n}, but the MPI job has {actual} processes with that role");
        }
    }
    Ok(())
}

impl DistStore {
    /// Joins the MPI job in this process's role (`DMLC_ROLE`).
    pub fn new(mode: DistMode) -> Result<DistStore> {
        let role = Role::current();
        let launched = ["OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE"].iter().any(|v| std::env::var_os(v).is_some());
        crate::ensure!(
            launched,
            "distributed stores need an MPI job: start every worker, server (and scheduler) with one mpirun, each with DMLC_ROLE set (no OMPI_COMM_WORLD_SIZE, PMIX_RANK or PMI_SIZE in the environment)"
        );
        let node = transport::start_mpi(role)?;
        check_counts(&node)?;
        let store = DistStore::on(node, mode)?;
        if let DistStore::Worker(worker) = &store {
            *LIVE_WORKER.lock() = Some(Arc::downgrade(worker));
        }
        Ok(store)
    }

    /// The store of `node` in the node's role, read from no environment variable and
    /// registered in no process global: the exit hook ([`shutdown_unfreed_worker`]) never
    /// sees it. Freeing a worker's store (or `RunServer` returning) finalizes only `node`.
    /// [`DistStore::new`] builds the MPI job's store with it; tests build loopback jobs.
    pub fn on(node: Arc<Node>, mode: DistMode) -> Result<DistStore> {
        Ok(match node.role() {
            Role::Worker => DistStore::Worker(Arc::new(Worker::start(node, mode)?)),
            Role::Server => DistStore::Server(Server::start(node)?),
            Role::Scheduler => DistStore::Scheduler(Scheduler::start(node)),
        })
    }

    /// A worker's mode (servers and schedulers hold no values of their own).
    fn mode(&self) -> Option<DistMode> {
        match self {
            DistStore::Worker(w) => Some(w.mode()),
            _ => None,
        }
    }

    fn role_name(&self) -> &'static str {
        match self {
            DistStore::Worker(_) => "worker",
            DistStore::Server(_) => "server",
            DistStore::Scheduler(_) => "scheduler",
        }
    }

    fn worker(&self, what: &str) -> Result<&Worker> {
        match self {
            DistStore::Worker(w) => Ok(w.as_ref()),
            _ => crate::bail!("{what} is for worker processes; this process is a {} (DMLC_ROLE)", self.role_name()),
        }
    }
}

/// A distributed store is its store's comm: a worker's values live on the servers, and the
/// group calls (ranks, barriers, commands, the server loop) go to the job.
impl Comm for DistStore {
    fn kind(&self) -> StoreKind {
        self.mode().map_or(StoreKind::Local, |m| if m.device { StoreKind::Device } else { StoreKind::Local })
    }

    fn sum_order(&self) -> SumOrder {
        match self.kind() {
            StoreKind::Local => SumOrder::CpuComm,
            _ => SumOrder::Serial,
        }
    }

    /// MXNet's dist workers compress every push once compression is set.
    fn applies_compression(&self) -> bool {
        true
    }

    fn rules(&self) -> Rules {
        Rules::distributed()
    }

    fn servers(&self, call: &str) -> Result<Option<&dyn Servers>> {
        Ok(Some(self.worker(call)? as &dyn Servers))
    }

    /// Rank within this process's group (workers among workers, servers among servers).
    fn rank(&self) -> i32 {
        match self {
            DistStore::Worker(w) => w.rank(),
            DistStore::Server(s) => s.rank(),
            DistStore::Scheduler(_) => 0,
        }
    }

    /// The number of workers, on every role.
    fn group_size(&self) -> i32 {
        match self {
            DistStore::Worker(w) => w.group_size(),
            DistStore::Server(s) => s.group_size(),
            DistStore::Scheduler(s) => s.group_size(),
        }
    }

    /// A barrier over the workers.
    fn barrier(&self) -> Result<()> {
        self.worker("Barrier")?.barrier()
    }

    /// Whether a push can be accepted now (`dist_async` needs an updater on every server).
    fn check_push_ready(&self) -> Result<()> {
        self.worker("push")?.check_servers_update()
    }

    /// Whether freeing a worker's store waits at the exit barrier.
    fn set_barrier_before_exit(&self, barrier: bool) {
        if let DistStore::Worker(w) = self {
            w.set_barrier_before_exit(barrier);
        }
    }

    /// Runs the server (or the scheduler's barriers) until worker 0 stops the servers.
    fn run_server(&self, controller: Option<Controller>) -> Result<()> {
        match self {
            DistStore::Worker(_) => crate::bail!("RunServer is for server and scheduler processes; this process is a worker (DMLC_ROLE)"),
            DistStore::Server(s) => s.run(controller),
            DistStore::Scheduler(s) => s.run(),
        }
        Ok(())
    }

    /// Sends a command to every server; returns after all of them handled it.
    fn send_command(&self, id: i32, body: &[u8]) -> Result<()> {
        self.worker("SendCommmandToServers")?.send_command(id, body)
    }

    /// A server applies pushes with its int updater (MXNet's servers call only that one); a
    /// worker's updaters stay unused (pushes go to the servers).
    fn set_updaters(&self, updaters: &Updaters) {
        if let DistStore::Server(s) = self {
            s.set_updater(updaters.int.clone());
        }
    }

    /// Worker 0 forwards the compression to the servers.
    fn set_compression(&self, compression: &GradientCompression) -> Result<()> {
        match self {
            DistStore::Worker(w) => w.set_gradient_compression(compression),
            _ => Ok(()),
        }
    }
}

impl Drop for DistStore {
    fn drop(&mut self) {
        if let DistStore::Worker(w) = self {
            w.shutdown();
        }
    }
}

/// The worker store of this process's MPI job (one distributed store per process), for the
/// exit hook; stores built on other nodes with [`DistStore::on`] are not recorded.
static LIVE_WORKER: once_cell::sync::Lazy<parking_lot::Mutex<Option<std::sync::Weak<Worker>>>> =
    once_cell::sync::Lazy::new(|| parking_lot::Mutex::new(None));

/// Runs the worker's exit protocol (wait, barrier, stop the servers, finalize) if this
/// process has a worker store that was never freed: a frontend that exits without freeing
/// it (MXNotifyShutdown at interpreter exit) must still let the servers stop. Bounded by
/// the exit watchdog; a no-op when there is no such store or it already ran.
pub fn shutdown_unfreed_worker() {
    let worker = LIVE_WORKER.lock().as_ref().and_then(std::sync::Weak::upgrade);
    if let Some(w) = worker {
        w.shutdown();
    }
}

/// Ends the MPI job, `reason` on stderr: for a failure after which every process would wait
/// for this one, or go on with a value it cannot trust. A no-op in a process without an MPI
/// job (loopback jobs included).
pub fn abort_job(reason: &str) {
    eprintln!("libkvstore: {reason}; aborting the MPI job");
    transport::abort_mpi_job_if_running(1);
}

/// Seconds the exit protocol may take before the job is aborted (`KVSTORE_DIST_EXIT_TIMEOUT`,
/// default 120): a peer that died or never reaches the exit barrier must not hang the job.
fn exit_timeout() -> std::time::Duration {
    let secs = std::env::var("KVSTORE_DIST_EXIT_TIMEOUT").ok().and_then(|v| v.trim().parse::<u64>().ok()).unwrap_or(120);
    std::time::Duration::from_secs(secs)
}

/// A guard that aborts its node's job unless dropped within the exit timeout.
pub(crate) struct Watchdog {
    cancel: Option<crossbeam::channel::Sender<()>>,
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.cancel.take();
    }
}

/// Aborts through `node`, not the process's MPI job: a loopback node's job is aborted, and
/// the test process lives on.
pub(crate) fn exit_watchdog(what: &'static str, node: &Arc<Node>) -> Watchdog {
    let (tx, rx) = crossbeam::channel::bounded::<()>(0);
    let timeout = exit_timeout();
    let node = Arc::clone(node);
    let spawned = std::thread::Builder::new().name("kvstore-exit-watchdog".into()).spawn(move || {
        if let Err(crossbeam::channel::RecvTimeoutError::Timeout) = rx.recv_timeout(timeout) {
            eprintln!("libkvstore: {what} did not finish within {} s (KVSTORE_DIST_EXIT_TIMEOUT); aborting the job", timeout.as_secs());
            node.abort(1);
        }
    });
    Watchdog { cancel: spawned.ok().map(|_| tx) }
}
