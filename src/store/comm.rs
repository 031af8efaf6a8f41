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
            StoreKind::Device => SumOrder::Serial,
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
/// its name selects (`dist_device_sync`: device) before they travel.
pub fn for_name(name: &str) -> Result<Box<dyn Comm>> {
    if name.contains("nccl") && !name.contains("dist") {
        crate::bail!("'{name}' needs NCCL and CUDA GPUs, which this build of libkvstore does not support");
    }
    Ok(Box::new(SingleProcess(if name.contains("device") { StoreKind::Device } else { StoreKind::Local })))
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
        assert!(for_name("nccl").err().unwrap().message().contains("NCCL"));
        let device = for_name("device").unwrap();
        assert_eq!((device.rank(), device.group_size(), device.sum_order()), (0, 1, SumOrder::Serial));
        assert!(device.applies_compression() && !for_name("local").unwrap().applies_compression());
    }
}
