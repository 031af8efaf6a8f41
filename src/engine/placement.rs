//! Which CPU each worker runs on. With as many workers as CPUs, the caller's thread makes one
//! more runnable thread than there are CPUs while it queues ops; two workers then share a CPU's
//! run queue and the one preempted in the middle of an op holds it for a whole time slice
//! (milliseconds), even after the other CPU goes idle, since Linux skips pulling a task onto a
//! CPU that idles only briefly. Each worker on a CPU of its own never waits behind another.
//! Several processes on one host (an MPI or ps-lite job's ranks) would pin their workers to
//! the same CPUs, so by default a process pins only where it seems alone.

/// `KVSTORE_PIN_WORKERS`: `1` pins (round-robin over the allowed CPUs), `0` never pins, unset
/// (or anything else) pins where the default below holds.
pub(super) const PIN_WORKERS_VAR: &str = "KVSTORE_PIN_WORKERS";

/// The environment variables by which launchers tell a rank how many ranks share its host
/// (Open MPI, MPICH/Hydra), or that it is one of ps-lite's processes.
const RANKS_ON_HOST_VARS: [&str; 2] = ["OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"];
const PSLITE_ROLE_VAR: &str = "DMLC_ROLE";

/// The CPU for each of `workers` workers, or `None` to leave them to the system: `setting` is
/// `KVSTORE_PIN_WORKERS` read as a flag, `allowed` the CPUs the process may use, `shared_host`
/// whether other ranks of a job may run on this host. By default a process pins when it has
/// one worker per allowed CPU (the default worker count) and at least two, and is alone.
pub(super) fn worker_cpus(workers: usize, allowed: &[usize], setting: Option<bool>, shared_host: bool) -> Option<Vec<usize>> {
    if allowed.len() < 2 || workers == 0 {
        return None;
    }
    let pin = setting.unwrap_or(workers == allowed.len() && !shared_host);
    pin.then(|| (0..workers).map(|i| allowed[i % allowed.len()]).collect())
}

/// `KVSTORE_PIN_WORKERS` as a flag (`None`: unset or not 0/1).
pub(super) fn setting() -> Option<bool> {
    match std::env::var(PIN_WORKERS_VAR).ok()?.trim() {
        "1" => Some(true),
        "0" => Some(false),
        _ => None,
    }
}

/// Whether a launcher says other ranks may share this host.
pub(super) fn shared_host() -> bool {
    let more_than_one = |v: &str| std::env::var(v).ok().and_then(|n| n.trim().parse::<usize>().ok()).is_some_and(|n| n > 1);
    RANKS_ON_HOST_VARS.iter().any(|v| more_than_one(v)) || std::env::var_os(PSLITE_ROLE_VAR).is_some()
}

#[cfg(test)]
mod tests {
    use super::worker_cpus;

    #[test]
    fn by_default_a_lone_process_with_one_worker_per_cpu_pins_each_to_its_own() {
        assert_eq!(worker_cpus(2, &[0, 1], None, false), Some(vec![0, 1]));
        assert_eq!(worker_cpus(3, &[2, 5, 7], None, false), Some(vec![2, 5, 7]));
    }

    #[test]
    fn by_default_nothing_is_pinned_on_a_shared_host_another_count_or_one_cpu() {
        assert_eq!(worker_cpus(2, &[0, 1], None, true), None);
        assert_eq!(worker_cpus(3, &[0, 1], None, false), None);
        assert_eq!(worker_cpus(1, &[0, 1], None, false), None);
        assert_eq!(worker_cpus(2, &[4], None, false), None);
        assert_eq!(worker_cpus(2, &[], None, false), None);
    }

    #[test]
    fn the_setting_forces_either_way() {
        assert_eq!(worker_cpus(3, &[0, 1], Some(true), true), Some(vec![0, 1, 0]));
        assert_eq!(worker_cpus(2, &[0, 1], Some(false), false), None);
        assert_eq!(worker_cpus(2, &[3], Some(true), false), None);
    }
}
