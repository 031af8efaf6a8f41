//! Roles in a distributed job, read from the parameter-server environment (`DMLC_*`,
//! `store::env`: `MXInitPSEnv`'s values take precedence over the process environment).

pub use crate::store::env::get as ps_env;

/// A process's role in a distributed job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Runs the training script: pushes and pulls.
    Worker,
    /// Holds a share of the keys and applies updates.
    Server,
    /// ps-lite's rendezvous process; on MPI it only joins the all-node barriers.
    Scheduler,
}

impl Role {
    /// The role named by `DMLC_ROLE` (unset, or any other value, means worker, as MXNet's
    /// `IsWorkerNode` answers).
    pub fn current() -> Role {
        Role::from_name(ps_env("DMLC_ROLE").as_deref())
    }

    /// The role for a `DMLC_ROLE` value.
    pub fn from_name(name: Option<&str>) -> Role {
        match name {
            Some("server") => Role::Server,
            Some("scheduler") => Role::Scheduler,
            _ => Role::Worker,
        }
    }

    /// Whether `DMLC_ROLE` names exactly `role` (MXNet's `Is*Node`: worker also when unset).
    pub fn is(role: &str) -> bool {
        match ps_env("DMLC_ROLE") {
            Some(r) => r == role,
            None => role == "worker",
        }
    }

    /// Its `DMLC_ROLE` name.
    pub fn name(self) -> &'static str {
        match self {
            Role::Worker => "worker",
            Role::Server => "server",
            Role::Scheduler => "scheduler",
        }
    }

    /// The number sent to the other processes at start-up.
    pub fn code(self) -> i32 {
        match self {
            Role::Worker => 0,
            Role::Server => 1,
            Role::Scheduler => 2,
        }
    }

    /// The role behind [`Role::code`].
    pub fn from_code(code: i32) -> Option<Role> {
        match code {
            0 => Some(Role::Worker),
            1 => Some(Role::Server),
            2 => Some(Role::Scheduler),
            _ => None,
        }
    }
}

/// A count from `DMLC_NUM_WORKER` / `DMLC_NUM_SERVER`, if set.
pub fn env_count(name: &str) -> crate::Result<Option<usize>> {
    match ps_env(name) {
        None => Ok(None),
        Some(v) => v
            .trim()
            .parse::<usize>()
            .map(Some)
            .map_err(|_| crate::Error::new(format!("{name}='{v}' is not a number"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_are_read_as_mxnet_reads_them() {
        assert_eq!(Role::from_name(None), Role::Worker);
        assert_eq!(Role::from_name(Some("worker")), Role::Worker);
        assert_eq!(Role::from_name(Some("server")), Role::Server);
        assert_eq!(Role::from_name(Some("scheduler")), Role::Scheduler);
        for r in [Role::Worker, Role::Server, Role::Scheduler] {
            assert_eq!(Role::from_code(r.code()), Some(r));
        }
        assert_eq!(Role::from_code(7), None);
    }
}
