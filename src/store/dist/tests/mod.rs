//! The distributed store's logic, tested on loopback jobs: every worker, server and scheduler
//! is a thread of the test process with its own [`LoopbackJob`] endpoint, so no `mpirun` is
//! needed. Expected values are computed here, independently of the store.
//!
//! The engine is the process's: a worker's exit waits for every op of the process
//! (`engine().wait_all()`), not only its own, so scenarios end with each worker waiting for
//! its last pull, and never leave a peer's push waiting on a worker that is exiting.

mod compression;
mod pairs;
mod refusals;
mod rounds;
mod row_sparse;

use super::transport::loopback::LoopbackJob;
use super::transport::{panic_text, Node};
use super::{dist_mode, Controller, DistMode, DistStore, Role};
use crate::ndarray::{Context, DType, NDArray};
use crate::store::{IntUpdater, KVStore, Keys};
use crossbeam::channel::{unbounded, Sender};
use parking_lot::Mutex;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a job may take before the test fails as hung.
const JOB_TIMEOUT: Duration = Duration::from_secs(120);

/// What a server node does before `RunServer`: install updaters, and return its controller.
type ServerSetup = Arc<dyn Fn(&Arc<KVStore>) -> Option<Controller> + Send + Sync>;
/// What a worker node runs, given its store (dropping the store afterwards is its exit).
type WorkerBody = Arc<dyn Fn(&KVStore) + Send + Sync>;

fn mode(name: &str) -> DistMode {
    dist_mode(name).expect("a distributed store name")
}

/// Runs one job of `roles` in `mode`: each node on its own thread; servers and the
/// scheduler in `RunServer` until the workers' exit stops them. Fails with the first node's
/// failure, or when a node has not finished within [`JOB_TIMEOUT`].
fn run_job(roles: &[Role], mode: DistMode, server: ServerSetup, worker: WorkerBody) -> Arc<LoopbackJob> {
    let (job, nodes) = LoopbackJob::start(roles);
    let (report, reports) = unbounded::<(usize, Result<(), String>)>();
    for (rank, node) in nodes.into_iter().enumerate() {
        let (report, server, worker) = (report.clone(), Arc::clone(&server), Arc::clone(&worker));
        std::thread::Builder::new()
            .name(format!("test-node-{rank}"))
            .spawn(move || run_node(rank, node, mode, &server, &worker, &report))
            .unwrap();
    }
    let deadline = Instant::now() + JOB_TIMEOUT;
    let mut unfinished: Vec<usize> = (0..roles.len()).collect();
    while !unfinished.is_empty() {
        let wait = deadline.saturating_duration_since(Instant::now());
        match reports.recv_timeout(wait) {
            Ok((rank, Ok(()))) => unfinished.retain(|&r| r != rank),
            Ok((rank, Err(e))) => panic!("node {rank} ({:?}) failed: {e}", roles[rank]),
            Err(_) => panic!("the job hung: nodes {unfinished:?} of {roles:?} did not finish within {JOB_TIMEOUT:?}"),
        }
    }
    assert_eq!(job.aborted(), None, "the job was aborted");
    job
}

/// The store type naming `mode`.
fn type_name(mode: DistMode) -> String {
    format!("dist{}_{}", if mode.device { "_device" } else { "" }, if mode.sync { "sync" } else { "async" })
}

/// One node of a job: builds its store (the one store, on a distributed comm over `node`),
/// then runs as its role does; reports once.
fn run_node(rank: usize, node: Arc<Node>, mode: DistMode, server: &ServerSetup, worker: &WorkerBody, report: &Sender<(usize, Result<(), String>)>) {
    let outcome = catch(|| {
        let role = node.role();
        let comm = DistStore::on(node, mode).map_err(|e| e.message().to_string())?;
        let store = Arc::new(KVStore::with_comm(type_name(mode), Box::new(comm)).map_err(|e| e.message().to_string())?);
        match role {
            Role::Worker => {
                let registered = super::LIVE_WORKER.lock().as_ref().and_then(std::sync::Weak::upgrade);
                assert!(registered.is_none(), "a loopback worker was registered for the process exit hook");
                // Reported before the store is dropped: a failed worker's exit may wait for
                // peers that wait for it.
                catch(|| {
                    worker(&store);
                    Ok(())
                })?;
                drop(store);
            }
            Role::Server => {
                let controller = server(&store);
                store.run_server(controller).map_err(|e| e.message().to_string())?;
            }
            Role::Scheduler => store.run_server(None).map_err(|e| e.message().to_string())?,
        }
        Ok(())
    });
    let _ = report.send((rank, outcome));
}

/// `f`'s result, or its panic as an error.
fn catch(f: impl FnOnce() -> Result<(), String>) -> Result<(), String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|payload| Err(panic_text(payload.as_ref())))
}

/// Servers that only serve.
fn plain_servers() -> ServerSetup {
    Arc::new(|_| None)
}

/// A float32 array of `shape` on the CPU, every element `value`.
fn filled(value: f32, shape: &[usize]) -> NDArray {
    let a = NDArray::zeros(shape, Context::cpu(0), DType::Float32).unwrap();
    a.copy_from_host(bytemuck::cast_slice(&vec![value; a.size()])).unwrap();
    a
}

/// An array's float32 values, after its pending writes.
fn read(a: &NDArray) -> Vec<f32> {
    let mut out = vec![0f32; a.size()];
    a.copy_to_host(bytemuck::cast_slice_mut(&mut out)).unwrap();
    out
}

/// Pulls `key` (of `shape`) into a fresh array and reads it.
fn pull(store: &KVStore, key: i32, shape: &[usize]) -> Vec<f32> {
    let out = filled(-1.0, shape);
    store.pull(Keys::Int(&[key]), vec![out.clone()], 0, true).unwrap();
    read(&out)
}

/// The error message of a call that must fail.
fn refusal(what: &str, r: crate::Result<()>) -> String {
    match r {
        Ok(()) => panic!("{what} was accepted"),
        Err(e) => e.message().to_string(),
    }
}

/// Which server parts of which keys an updater was called with: (server rank, key, elements).
type UpdateLog = Arc<Mutex<Vec<(i32, i32, usize)>>>;

/// A server updater `stored += recv` (float32, dense) that logs each call under `server`.
fn adding_updater(server: i32, log: &UpdateLog) -> IntUpdater {
    let log = Arc::clone(log);
    Arc::new(move |key, recv: NDArray, stored: NDArray| {
        log.lock().push((server, key, recv.size()));
        let (r, mut s) = (read(&recv), read(&stored));
        s.iter_mut().zip(&r).for_each(|(s, r)| *s += r);
        stored.copy_from_host(bytemuck::cast_slice(&s)).unwrap();
    })
}
