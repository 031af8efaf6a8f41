//! The communication seam: how a store's values meet. MXNet's `local` stores reduce on the
//! host (`CommCPU`), `device` stores as its `CommDevice` does; a distributed store (next: over
//! MPI) adds workers, ranks and barriers. The store asks its [`Comm`] and nothing else about
//! these; which one a store gets follows MXNet's type names ([`for_name`]).

use crate::backend::SumOrder;
use crate::error::Result;

/// What a store's communication decides.
pub trait Comm: Send + Sync {
    /// The kind, as MXNet names its Comm.
    fn kind(&self) -> StoreKind;
    /// How the values of one key are associated when summed.
    fn sum_order(&self) -> SumOrder;
    /// Whether pushes apply the gradient compression set on the store (MXNet's `CommCPU`
    /// accepts it and ignores it).
    fn applies_compression(&self) -> bool;
    /// This worker's rank.
    fn rank(&self) -> i32;
    /// The number of workers.
    fn group_size(&self) -> i32;
    /// Waits until every worker has reached the barrier.
    fn barrier(&self) -> Result<()>;
    /// The number of dead nodes among `node_id`'s group, given `timeout_sec` of silence.
    fn num_dead_nodes(&self, node_id: i32, timeout_sec: i32) -> Result<i32>;
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

    fn rank(&self) -> i32 {
        0
    }

    fn group_size(&self) -> i32 {
        1
    }

    fn barrier(&self) -> Result<()> {
        Ok(())
    }

    fn num_dead_nodes(&self, _node_id: i32, _timeout_sec: i32) -> Result<i32> {
        Ok(0)
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
