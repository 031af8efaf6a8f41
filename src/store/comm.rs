//! Store types from MXNet's type names.

use crate::error::Result;

/// How a store reduces: MXNet's `CommCPU` or `CommDevice`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreKind {
    /// `local`, `local_update_cpu`, `local_allreduce_cpu`, and any unknown name.
    Local,
    /// Any name containing `device`.
    Device,
}

impl StoreKind {
    /// The kind MXNet's `KVStore::Create` picks for the lower-cased `name`.
    pub fn from_name(name: &str) -> Result<StoreKind> {
        if name.contains("dist") {
            crate::bail!(
                "distributed stores are not built yet: '{name}' needs the MPI-based dist_sync/dist_async/dist_device_sync support"
            );
        }
        if name.contains("nccl") {
            crate::bail!("'{name}' needs NCCL and CUDA GPUs: {}", crate::gpu::require_device(0).unwrap_err());
        }
        Ok(if name.contains("device") { StoreKind::Device } else { StoreKind::Local })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_select_kinds_as_mxnet_does() {
        assert_eq!(StoreKind::from_name("local").unwrap(), StoreKind::Local);
        assert_eq!(StoreKind::from_name("row_sparse").unwrap(), StoreKind::Local);
        assert_eq!(StoreKind::from_name("").unwrap(), StoreKind::Local);
        assert_eq!(StoreKind::from_name("local_allreduce_device").unwrap(), StoreKind::Device);
        assert!(StoreKind::from_name("dist_sync").unwrap_err().message().contains("distributed"));
        assert!(StoreKind::from_name("nccl").is_err());
    }
}
