//! The communication seam: how a store's values meet. MXNet's `local` stores reduce on the
//! host (`CommCPU`), `device` stores as its `CommDevice` does; a distributed store's values
//! live on server processes (`store::dist`), reached through [`Servers`]. The store plans and
//! checks every call once (`plan`), with the [`Rules`] its comm adds, then asks its [`Comm`]
//! and nothing else about where the values go; which comm a store gets follows MXNet's type
//! names ([`for_name`], `dist::dist_mode`).

use crate::backend::{GradientCompression, SumOrder};
use crate::error::Result;
use crate::ndarray::NDArray;

/// What a store's communication decides.
pub trait Comm: Send + Sync {
    /// The kind, as MXNet names its Comm (a distributed store: that of its workers' own sums).
    fn kind(&self) -> StoreKind;
    /// How the values of one key are associated when summed.
    fn sum_order(&self) -> SumOrder;
    /// Whether pushes apply the gradient compression set on the store (MXNet's `CommCPU`
    /// accepts it and ignores it).
    fn applies_compression(&self) -> bool;
    /// The rules this comm adds to the planner's checks.
    fn rules(&self) -> Rules {
        Rules::default()
    }
    /// Where a data call (`call`: init, push, pull, …) of this process goes: `None`, the
    /// store's own values; the servers of a distributed worker; an error for processes that
    /// hold no values (a distributed store's servers and scheduler).
    fn servers(&self, _call: &str) -> Result<Option<&dyn Servers>> {
        Ok(None)
    }
    /// This worker's rank.
    fn rank(&self) -> i32 {
        0
    }
    /// The number of workers.
    fn group_size(&self) -> i32 {
        1
    }
    /// Waits until every worker has reached the barrier.
    fn barrier(&self) -> Result<()> {
        Ok(())
    }
    /// The number of dead nodes among `node_id`'s group, given `timeout_sec` of silence.
    fn num_dead_nodes(&self, _node_id: i32, _timeout_sec: i32) -> Result<i32> {
        Ok(0)
    }
    /// Refuses a push that would be refused whatever its values (`dist_async` without an
    /// updater on every server).
    fn check_push_ready(&self) -> Result<()> {
        Ok(())
    }
    /// Records whether freeing the store waits at a barrier.
    fn set_barrier_before_exit(&self, _barrier: bool) {}
    /// Runs a server until worker 0 stops it: returns at once where there is none.
    fn run_server(&self, _controller: Option<super::dist::Controller>) -> Result<()> {
        Ok(())
    }
    /// Sends a command to the servers: nothing to do where there are none.
    fn send_command(&self, _id: i32, _body: &[u8]) -> Result<()> {
        Ok(())
    }
    /// Learns the store's new updaters (a server applies pushes with its int updater).
    fn set_updaters(&self, _updaters: &super::Updaters) {}
    /// Learns the store's gradient compression (worker 0 of a distributed store forwards it
    /// to the servers).
    fn set_compression(&self, _compression: &GradientCompression) -> Result<()> {
        Ok(())
    }
}

/// The rules a comm adds to the planner's, each checked before anything changes. The
/// defaults are those of the single-process stores. A distributed store's servers hold each
/// key in one storage type and answer dense pulls of dense keys only, as MXNet's
/// `KVStoreDist`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Rules {
    /// A push must match the key's storage type (a single-process store instead replaces the
    /// stored value with one of the sum's type).
    pub push_keeps_storage_type: bool,
    /// Row_sparse keys are read with `PullRowSparse` only.
    pub pull_dense_keys_only: bool,
    /// Pulls must skip sparse outputs (`ignore_sparse`).
    pub pull_ignores_sparse: bool,
    /// A push-pull names the same keys in both lists, outputs of the stored dtype, and is
    /// refused with gradient compression.
    pub push_pull_same_keys: bool,
    /// A row_sparse init value has rows of at least one element.
    pub row_sparse_needs_rows: bool,
    /// A `PullRowSparse` names each key once.
    pub row_sparse_pull_once_per_key: bool,
}

impl Rules {
    /// The rules of a distributed store.
    pub fn distributed() -> Rules {
        Rules {
            push_keeps_storage_type: true,
            pull_dense_keys_only: true,
            pull_ignores_sparse: true,
            push_pull_same_keys: true,
            row_sparse_needs_rows: true,
            row_sparse_pull_once_per_key: true,
        }
    }
}

/// A distributed worker's data path: each key's values live on server processes. The store
/// has checked each call before it gets here; these shard, send and receive. A key's
/// `stored` array is this worker's buffer of it: pulls land there, and the store copies it
/// into the outputs.
pub trait Servers: Send + Sync {
    /// Initialises new keys `(id, value, stored)`: worker 0 sends the values, then every
    /// worker waits at a barrier (reached even when sending failed). `compression` shapes how
    /// the keys are sharded.
    fn init(&self, inits: &[(i32, NDArray, NDArray)], compression: Option<GradientCompression>) -> Result<()>;
    /// Sends each key's values `(id, values, stored)`, summed here first (and quantised with
    /// `compression`); with `fetch_back`, the servers' answers fill `stored` (push-pull).
    fn push(&self, jobs: Vec<(i32, Vec<NDArray>, NDArray)>, compression: Option<GradientCompression>, fetch_back: bool, priority: i32);
    /// Fills `stored` with key `id`'s value on the servers.
    fn fetch(&self, id: i32, stored: &NDArray, priority: i32);
    /// Fills the row_sparse `stored` with the rows `row_ids` of key `id` on the servers.
    fn fetch_rows(&self, id: i32, stored: &NDArray, row_ids: &NDArray, priority: i32) -> Result<()>;
}

/// The kinds of communication.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreKind {
    /// MXNet's `CommCPU`: `local`, `local_update_cpu`, `local_allreduce_cpu`, and any unknown name.
    Local,
    /// MXNet's `CommDevice`: any name containing `device`.
    Device,
    /// MXNet's `KVStoreNCCL`: any name containing `nccl` but not `dist`. It reduces as
    /// `Device` does, with the restrictions of [`super::nccl`].
    Nccl,
}

/// One process, one worker: the local kinds.
struct SingleProcess(StoreKind);

impl Comm for SingleProcess {
    fn kind(&self) -> StoreKind {
        self.0
    }

    fn sum_order(&self) -> SumOrder {
        match self.0 {
            StoreKind::Local => SumOrder::CpuComm,
            // NCCL leaves its order open; the left fold of the device store is used.
            StoreKind::Device | StoreKind::Nccl => SumOrder::Serial,
        }
    }

    fn applies_compression(&self) -> bool {
        self.0 == StoreKind::Device
    }
}

/// The communication MXNet's `KVStore::Create` picks for the lower-cased `name`. A
/// distributed store's own worker (`store::dist`) reduces a worker's values with the kind
/// its name selects (`dist_device_sync`: device) before they travel. An `nccl` store needs a
/// usable GPU: without one it is refused here, at its creation (MXNet without NCCL refuses the
/// name at creation too), rather than at a first push.
pub fn for_name(name: &str) -> Result<Box<dyn Comm>> {
    let kind = kind_of(name);
    if kind == StoreKind::Nccl {
        crate::backend::require_gpus().map_err(|e| {
            crate::Error::new(format!(
                "the '{name}' store sums on CUDA GPUs, and this process has none: {}",
                e.message()
            ))
        })?;
    }
    Ok(Box::new(SingleProcess(kind)))
}

/// The kind MXNet's `KVStore::Create` picks for a lower-cased, non-distributed `name`.
pub(super) fn kind_of(name: &str) -> StoreKind {
    if name.contains("nccl") && !name.contains("dist") {
        StoreKind::Nccl
    } else if name.contains("device") {
        StoreKind::Device
    } else {
        StoreKind::Local
    }
}

/// A single-process comm of `kind`, for tests that run an `nccl` store's rules on host
/// values without a GPU.
#[cfg(test)]
pub(super) fn single_process(kind: StoreKind) -> Box<dyn Comm> {
    Box::new(SingleProcess(kind))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(name: &str) -> StoreKind {
        for_name(name).unwrap().kind()
    }

    #[test]
    fn names_select_kinds_as_mxnet_does() {
        assert_eq!(kind("local"), StoreKind::Local);
        assert_eq!(kind("row_sparse"), StoreKind::Local);
        assert_eq!(kind(""), StoreKind::Local);
        assert_eq!(kind("local_allreduce_device"), StoreKind::Device);
        assert_eq!(kind("dist_sync"), StoreKind::Local);
        assert_eq!(kind("dist_device_sync"), StoreKind::Device);
        assert_eq!(kind_of("nccl"), StoreKind::Nccl);
        assert_eq!(kind_of("nccl_device"), StoreKind::Nccl, "nccl wins over device, as in MXNet");
        assert_eq!(kind_of("dist_nccl"), StoreKind::Local, "dist names never make an nccl store");
        // An nccl store needs a GPU: refused at creation without one (CI), made with one.
        match crate::backend::require_gpus() {
            Err(_) => {
                let err = for_name("nccl").err().unwrap();
                assert!(err.message().contains("'nccl' store sums on CUDA GPUs") && err.message().contains("no usable CUDA device"), "{err}");
            }
            Ok(_) => assert_eq!(kind("nccl"), StoreKind::Nccl),
        }
        let nccl = single_process(StoreKind::Nccl);
        assert!(!nccl.applies_compression() && nccl.sum_order() == SumOrder::Serial);
        let device = for_name("device").unwrap();
        assert_eq!((device.rank(), device.group_size(), device.sum_order()), (0, 1, SumOrder::Serial));
        assert!(device.applies_compression() && !for_name("local").unwrap().applies_compression());
    }
}
