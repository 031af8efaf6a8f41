//! Distributed store names, as MXNet 1.9's `KVStore::Create` reads them (`src/kvstore/kvstore.cc`).

/// What a distributed store name asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DistMode {
    /// Servers wait for every worker's push before updating (all names without `_async`).
    pub sync: bool,
    /// Workers reduce their own values as the `device` store does.
    pub device: bool,
}

/// The mode of the lower-cased store name, or `None` if it is not distributed.
pub fn dist_mode(name: &str) -> Option<DistMode> {
    name.contains("dist").then(|| DistMode { sync: !name.contains("_async"), device: name.contains("device") })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_as_mxnet_parses_them() {
        let sync = |name: &str| dist_mode(name).map(|m| m.sync);
        assert_eq!(sync("dist"), Some(true));
        assert_eq!(sync("dist_sync"), Some(true));
        assert_eq!(sync("dist_device_sync"), Some(true));
        assert_eq!(sync("dist_sync_device"), Some(true));
        assert_eq!(sync("dist_async"), Some(false));
        assert_eq!(dist_mode("dist_device_sync").map(|m| m.device), Some(true));
        assert_eq!(dist_mode("dist_sync_device").map(|m| m.device), Some(true));
        assert_eq!(dist_mode("dist_sync").map(|m| m.device), Some(false));
        assert_eq!(dist_mode("local"), None);
        assert_eq!(dist_mode("device"), None);
    }
}
