//! The process environment of stores: the parameter-server settings (`DMLC_*`), from
//! `MXInitPSEnv` or, failing that, the environment. A distributed store reads its role, its
//! peers and its rank here.

use once_cell::sync::Lazy;
use parking_lot::RwLock;
use std::collections::HashMap;

/// Values given by `MXInitPSEnv`; they take precedence over the process environment.
static PS_ENV: Lazy<RwLock<HashMap<String, String>>> = Lazy::new(|| RwLock::new(HashMap::new()));

/// Records `keys[i] = vals[i]` (`MXInitPSEnv`).
pub fn set(keys: &[&str], vals: &[&str]) {
    let mut env = PS_ENV.write();
    for (k, v) in keys.iter().zip(vals) {
        env.insert((*k).to_string(), (*v).to_string());
    }
}

/// A parameter-server setting: `MXInitPSEnv`'s value, else the environment's.
pub fn get(name: &str) -> Option<String> {
    PS_ENV.read().get(name).cloned().or_else(|| std::env::var(name).ok())
}

/// Whether this process has `role` (`worker`, `server`, `scheduler`; an unset `DMLC_ROLE`
/// means worker).
pub fn has_role(role: &str) -> bool {
    get("DMLC_ROLE").unwrap_or_else(|| "worker".to_string()) == role
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn init_ps_env_values_win_over_the_environment() {
        set(&["KVSTORE_TEST_PS_VALUE"], &["from-init"]);
        assert_eq!(get("KVSTORE_TEST_PS_VALUE").as_deref(), Some("from-init"));
        assert_eq!(get("KVSTORE_TEST_PS_UNSET"), None);
    }
}
