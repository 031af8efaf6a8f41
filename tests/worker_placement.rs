//! The engine's workers are pinned one per CPU in a process alone on its host, and left to the
//! system where `KVSTORE_PIN_WORKERS=0` says so or a launcher says other ranks share the host
//! (engine::placement). Each case runs in a child process (this test binary again), since the
//! engine starts once per process and reads the environment then.

use std::process::Command;

/// In the child: starts the engine and prints each worker's allowed CPUs, one line per worker.
#[test]
fn child_report() {
    if std::env::var_os("WORKER_PLACEMENT_CHILD").is_none() {
        return;
    }
    kvstore::engine::engine().wait_all().unwrap();
    // With nothing running, every worker is spare.
    let workers = kvstore::engine::engine().thread_budget() - 1;
    // A worker names and then pins itself as it starts: read until every worker is seen and
    // a read 100 ms later agrees.
    let mut lines = read_workers();
    for _ in 0..100 {
        std::thread::sleep(std::time::Duration::from_millis(100));
        let again = read_workers();
        if again == lines && lines.len() == workers {
            break;
        }
        lines = again;
    }
    for l in lines {
        println!("WORKER {l}");
    }
}

/// Each worker thread's allowed CPUs ("kvstore-worker- 0-1"; a thread name is cut to 15
/// bytes), sorted by thread id.
fn read_workers() -> Vec<String> {
    let mut lines = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").unwrap() {
        let dir = task.unwrap().path();
        let Ok(comm) = std::fs::read_to_string(dir.join("comm")) else { continue };
        if !comm.starts_with("kvstore-worker") {
            continue;
        }
        let Ok(status) = std::fs::read_to_string(dir.join("status")) else { continue };
        let cpus = status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).unwrap().trim().to_string();
        let tid: u64 = dir.file_name().unwrap().to_str().unwrap().parse().unwrap();
        lines.push((tid, format!("{} {cpus}", comm.trim())));
    }
    lines.sort();
    lines.into_iter().map(|(_, l)| l).collect()
}

/// Each worker's allowed-CPU list, by worker, from a child run with `env` set on top of a
/// clean placement environment.
fn workers_cpus(env: &[(&str, &str)]) -> Vec<String> {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", "child_report", "--nocapture", "--test-threads", "1"]).env("WORKER_PLACEMENT_CHILD", "1");
    for v in ["KVSTORE_PIN_WORKERS", "MXNET_CPU_WORKER_NTHREADS", "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "DMLC_ROLE", "KVSTORE_HOST_LIBRARY"] {
        cmd.env_remove(v);
    }
    cmd.envs(env.iter().copied());
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "child failed: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    // The harness prints "test child_report ... " on the first worker's line.
    let cpus: Vec<String> = text.lines().filter_map(|l| l.split_once("WORKER ").map(|(_, w)| w)).map(|l| l.split_once(' ').unwrap().1.to_string()).collect();
    assert!(!cpus.is_empty(), "no worker threads seen:\n{text}");
    cpus
}

fn process_cpus() -> String {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).unwrap().trim().to_string()
}

fn cpu_count() -> usize {
    std::thread::available_parallelism().unwrap().get()
}

#[test]
fn a_lone_process_pins_each_worker_to_a_cpu_of_its_own() {
    let cpus = workers_cpus(&[]);
    if cpu_count() < 2 {
        assert!(cpus.iter().all(|c| *c == process_cpus()), "{cpus:?}");
        return;
    }
    assert_eq!(cpus.len(), cpu_count());
    let mut distinct = cpus.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), cpus.len(), "two workers share a CPU: {cpus:?}");
    assert!(cpus.iter().all(|c| c.parse::<usize>().is_ok()), "a worker not pinned to one CPU: {cpus:?}");
}

#[test]
fn workers_are_left_to_the_system_when_told_or_when_ranks_share_the_host() {
    let all = process_cpus();
    for env in [&[("KVSTORE_PIN_WORKERS", "0")][..], &[("OMPI_COMM_WORLD_LOCAL_SIZE", "2")], &[("DMLC_ROLE", "worker")], &[("MXNET_CPU_WORKER_NTHREADS", "5")]] {
        let cpus = workers_cpus(env);
        assert!(cpus.iter().all(|c| *c == all), "{env:?}: {cpus:?} (process: {all})");
    }
}

#[test]
fn the_setting_pins_on_a_shared_host_too() {
    if cpu_count() < 2 {
        return;
    }
    let cpus = workers_cpus(&[("KVSTORE_PIN_WORKERS", "1"), ("OMPI_COMM_WORLD_LOCAL_SIZE", "2")]);
    assert!(cpus.iter().all(|c| c.parse::<usize>().is_ok()), "{cpus:?}");
}
