//! The distributed-store C programs (`ctests/dist_*.c`) under one MPMD `mpirun` on loopback:
//! servers, workers (and a scheduler) in one MPI job, each with `DMLC_ROLE` set, every run
//! bounded by `mpirun --timeout`. Skipped, with the reason printed, where Open MPI's `mpirun`
//! is missing; `scripts/setup.sh` (run by `scripts/test.sh`) installs it, and `KVSTORE_REQUIRE_MPI=1`
//! makes a skip a failure.

mod common;

use common::{lib_dir, root};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn mpirun_available() -> bool {
    let found = Command::new("mpirun").arg("--version").output().is_ok_and(|o| o.status.success());
    if !found {
        assert!(std::env::var_os("KVSTORE_REQUIRE_MPI").is_none(), "KVSTORE_REQUIRE_MPI is set but mpirun is missing");
        eprintln!("skipped: mpirun (Open MPI, Debian openmpi-bin) is not installed");
    }
    found
}

/// Builds the MPI plugin beside libkvstore.so (a workspace member the lib build skips).
fn plugin_dir() -> PathBuf {
    let dir = lib_dir();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut build = Command::new(cargo);
    build.args(["build", "--quiet", "-p", "kvstore-mpi"]).current_dir(root());
    if dir.ends_with("release") {
        build.arg("--release");
    }
    assert!(build.status().expect("run cargo build").success(), "cargo build of libkvstore_mpi.so failed");
    assert!(dir.join("libkvstore_mpi.so").exists());
    dir
}

/// Builds `ctests/<name>.c` once per test run (tests run in parallel and share programs).
fn build(name: &str) -> PathBuf {
    static BUILT: std::sync::Mutex<Vec<(String, PathBuf)>> = std::sync::Mutex::new(Vec::new());
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, exe)) = built.iter().find(|(n, _)| n == name) {
        return exe.clone();
    }
    let exe = compile(name);
    built.push((name.to_string(), exe.clone()));
    exe
}

fn compile(name: &str) -> PathBuf {
    compile_with(name, "", &[])
}

/// `compile` with extra compiler flags, into `ctest-<name><suffix>`.
fn compile_with(name: &str, suffix: &str, flags: &[&str]) -> PathBuf {
    let library = plugin_dir();
    let exe = library.join(format!("ctest-{name}{suffix}"));
    common::compile_ctest(name, &exe, &library, flags, &["-lm"]);
    exe
}

/// One MPMD job: `servers` servers, `workers` workers, `schedulers` schedulers, each running
/// `exe args`, with a wall-clock bound of `timeout` seconds.
fn mpirun(exe: &Path, args: &[&str], servers: usize, workers: usize, schedulers: usize, timeout: u32) -> Output {
    mpirun_with_env(exe, args, servers, workers, schedulers, timeout, &[])
}

/// As `mpirun`, with `extra` NAME=VALUE settings in every process (the test binary's own
/// environment is shared by tests running in parallel, so it is never changed).
fn mpirun_with_env(exe: &Path, args: &[&str], servers: usize, workers: usize, schedulers: usize, timeout: u32, extra: &[&str]) -> Output {
    let mut common = vec![
        "OMP_NUM_THREADS=1".to_string(),
        format!("DMLC_NUM_WORKER={workers}"),
        format!("DMLC_NUM_SERVER={servers}"),
        // Key 9 (1000 values) is then split over the servers; small keys are not.
        "MXNET_KVSTORE_BIGARRAY_BOUND=100".to_string(),
        "OMPI_MCA_mpi_yield_when_idle=1".to_string(),
        "KVSTORE_DIST_EXIT_TIMEOUT=60".to_string(),
    ];
    common.extend(extra.iter().map(|s| s.to_string()));
    let mut cmd = Command::new("mpirun");
    cmd.args(["--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "--timeout"]).arg(timeout.to_string());
    cmd.args(["--mca", "btl", "self,vader,tcp", "--mca", "btl_tcp_if_include", "lo", "--mca", "oob_tcp_if_include", "lo"]);
    // `-x` only reaches the first app context of an MPMD command line: set the environment
    // of every context with `env`.
    let mut first = true;
    for (n, role) in [(servers, "server"), (workers, "worker"), (schedulers, "scheduler")] {
        if n == 0 {
            continue;
        }
        if !first {
            cmd.arg(":");
        }
        first = false;
        cmd.args(["-np", &n.to_string(), "env"]).args(&common).arg(format!("DMLC_ROLE={role}")).arg(exe).args(args);
    }
    cmd.env_remove("DMLC_ROLE");
    cmd.output().expect("run mpirun")
}

fn assert_job_passed(what: &str, out: &Output, oks: usize) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.matches(" ok").count() == oks,
        "{what} failed ({}):\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn dist_sync_two_servers_two_workers_and_a_scheduler() {
    if !mpirun_available() {
        return;
    }
    let exe = build("dist_store");
    assert_job_passed("dist_sync 2 servers 2 workers 1 scheduler", &mpirun(&exe, &["dist_sync"], 2, 2, 1, 120), 5);
}

#[test]
fn dist_device_sync_one_server_three_workers() {
    if !mpirun_available() {
        return;
    }
    let exe = build("dist_store");
    assert_job_passed("dist_device_sync 1 server 3 workers", &mpirun(&exe, &["dist_device_sync"], 1, 3, 0, 120), 4);
}

/// The last line a script prints (a path).
fn script_output(script: &str) -> String {
    let out = Command::new(root().join(script)).output().expect("run a script");
    assert!(out.status.success(), "{script} failed:\n{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).lines().last().unwrap_or_default().trim().to_string()
}

#[test]
fn dist_device_sync_with_gpu_values_on_the_cuda_standin() {
    if !mpirun_available() {
        return;
    }
    // Every array of the program on gpu(i), three stand-in GPUs per process (docs/gpu.md).
    let exe = compile_with("dist_store", "-gpu", &["-DDEV_CPU=2"]);
    let standin = script_output("scripts/cuda-standin.sh");
    let nvrtc = std::env::var("KVSTORE_NVRTC_PATH").unwrap_or_else(|_| script_output("scripts/nvrtc-wheel.sh"));
    let nvrtc_dir = Path::new(&nvrtc).parent().map(|d| d.display().to_string()).unwrap_or_default();
    let env = [format!("LD_LIBRARY_PATH={standin}:{nvrtc_dir}"), "CUDA_STANDIN_DEVICES=3".to_string(), format!("KVSTORE_NVRTC_PATH={nvrtc}")];
    let env: Vec<&str> = env.iter().map(String::as_str).collect();
    let out = mpirun_with_env(&exe, &["dist_device_sync"], 1, 3, 0, 150, &env);
    assert_job_passed("dist_device_sync with GPU values, 1 server 3 workers", &out, 4);
}

#[test]
fn dist_async_with_a_server_updater() {
    if !mpirun_available() {
        return;
    }
    let exe = build("dist_async");
    assert_job_passed("dist_async 1 server 2 workers", &mpirun(&exe, &[], 1, 2, 0, 120), 3);
}

/// Workers that never free their store (a frontend exiting with the store alive) still stop
/// the servers: MXNotifyShutdown runs the exit protocol, well before the exit watchdog.
#[test]
fn workers_exiting_without_free_stop_the_servers_at_notify_shutdown() {
    if !mpirun_available() {
        return;
    }
    let exe = build("dist_async");
    let start = std::time::Instant::now();
    assert_job_passed("dist_async notify 1 server 2 workers", &mpirun(&exe, &["notify"], 1, 2, 0, 120), 3);
    assert!(start.elapsed().as_secs() < 60, "the job took {:?}", start.elapsed());
}

#[test]
fn a_killed_worker_fails_the_job_fast() {
    if !mpirun_available() {
        return;
    }
    let exe = build("dist_killed");
    let start = Instant::now();
    let out = mpirun(&exe, &[], 1, 3, 0, 60);
    let took = start.elapsed();
    assert!(!out.status.success(), "the job with a killed worker exited 0:\n{}", String::from_utf8_lossy(&out.stderr));
    // mpirun's own --timeout (60 s) is the outer bound; Open MPI aborts the job much sooner.
    assert!(took < Duration::from_secs(50), "the job took {took:?} to fail");
}

/// An internal error (a panic) while a server handles a message ends the job at once with
/// the reason, rather than leaving the worker waiting for a reply that never comes.
#[test]
fn a_server_panic_fails_the_job_fast_with_the_reason() {
    if !mpirun_available() {
        return;
    }
    let exe = build("dist_store");
    let start = Instant::now();
    let out = mpirun_with_env(&exe, &["dist_sync"], 1, 2, 0, 60, &["KVSTORE_TEST_FAILPOINT=server-push-panic:4"]);
    let took = start.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the job with a panicking server exited 0:\n{stderr}");
    assert!(stderr.contains("internal error handling a message from rank"), "no reason on stderr:\n{stderr}");
    assert!(stderr.contains("server's push of 4 elements panicked"), "no panic message on stderr:\n{stderr}");
    assert!(took < Duration::from_secs(50), "the job took {took:?} to fail");
}

/// The `hash ...` lines of a passed `dist_reproducible` job, checked to be the same on every
/// worker; returned once.
fn reproducible_hashes(what: &str, out: &Output, workers: usize) -> Vec<String> {
    assert_job_passed(what, out, workers);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let mut lines: Vec<String> = stdout.lines().filter(|l| l.starts_with("hash ")).map(str::to_string).collect();
    lines.sort();
    let mut unique = lines.clone();
    unique.dedup();
    assert!(!unique.is_empty(), "{what}: no hashes:\n{stdout}");
    assert_eq!(lines.len(), unique.len() * workers, "{what}: the workers pulled different values:\n{stdout}");
    unique
}

/// Delays that make the pushes of a round reach the servers in reverse rank order (the last
/// rank first), for `workers` workers.
fn reversed_arrival(workers: usize) -> String {
    let spec: Vec<String> = (0..workers - 1).map(|r| format!("{r}:{}", (workers - 1 - r) * 15_000)).collect();
    format!("KVSTORE_DIST_TEST_DELAY_US={}", spec.join(","))
}

/// Delays that make them arrive in rank order.
fn forward_arrival(workers: usize) -> String {
    let spec: Vec<String> = (1..workers).map(|r| format!("{r}:{}", r * 15_000)).collect();
    format!("KVSTORE_DIST_TEST_DELAY_US={}", spec.join(","))
}

/// A dist_sync job gives byte-identical pulls (hence server state) run twice, the second time
/// with its pushes reaching the servers in reverse rank order: dense float32 keys on one and
/// on both servers, float16 keys with float32 masters, row_sparse keys, without and with a
/// server updater, and 2-bit compressed keys; 3 and 4 workers, 2 servers.
#[test]
fn dist_sync_sums_are_the_same_bits_whatever_the_arrival_order() {
    if !mpirun_available() {
        return;
    }
    let exe = build("dist_reproducible");
    for workers in [3, 4] {
        for job in ["plain", "compressed"] {
            let what = format!("dist_reproducible {job}, {workers} workers 2 servers");
            let first = reproducible_hashes(&what, &mpirun(&exe, &[job], 2, workers, 0, 120), workers);
            let again = reproducible_hashes(&what, &mpirun(&exe, &[job], 2, workers, 0, 120), workers);
            let shuffled = reproducible_hashes(&what, &mpirun_with_env(&exe, &[job], 2, workers, 0, 120, &[&reversed_arrival(workers)]), workers);
            assert_eq!(first, again, "{what}: a second run pulled other bits");
            assert_eq!(first, shuffled, "{what}: with the pushes arriving in reverse rank order the pulls differ");
        }
    }
}

/// The control: summed in arrival order (`KVSTORE_DIST_SUM_ORDER=arrival`, ps-lite's order),
/// the same job pulls other bits when the arrival order is reversed, so the test above can
/// fail. Compressed rounds add ±threshold or 0 and are not asked to differ.
#[test]
fn summed_in_arrival_order_the_same_job_gives_other_bits() {
    if !mpirun_available() {
        return;
    }
    let exe = build("dist_reproducible");
    let workers = 3;
    let run = |delays: String| {
        let out = mpirun_with_env(&exe, &["plain"], 2, workers, 0, 120, &["KVSTORE_DIST_SUM_ORDER=arrival", &delays]);
        reproducible_hashes("dist_reproducible plain in arrival order", &out, workers)
    };
    let (forward, reversed) = (run(forward_arrival(workers)), run(reversed_arrival(workers)));
    let differing: Vec<&String> = forward.iter().filter(|l| !reversed.contains(l)).collect();
    eprintln!("summed in arrival order, keys whose pulls changed with the arrival order: {differing:?}");
    assert!(!differing.is_empty(), "arrival order made no difference: {forward:?}");
}

/// A bad `KVSTORE_DIST_SUM_ORDER` fails the servers' Create with the variable named.
#[test]
fn a_bad_sum_order_is_refused_by_name() {
    if !mpirun_available() {
        return;
    }
    let exe = build("dist_reproducible");
    let out = mpirun_with_env(&exe, &["plain"], 1, 2, 0, 60, &["KVSTORE_DIST_SUM_ORDER=fastest"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the job with KVSTORE_DIST_SUM_ORDER=fastest exited 0");
    assert!(stderr.contains("KVSTORE_DIST_SUM_ORDER=\"fastest\""), "no reason on stderr:\n{stderr}");
}

/// Uneven data: workers with 6, 4 and 2 rounds of work (and 1 with four workers). Each one
/// that is done joins (by freeing its store, or at MXNotifyShutdown), and the others' later
/// rounds complete without it, its share zero: dense keys on one and on both servers,
/// PushPull, row_sparse pushes and pulls, Barrier, and 2-bit compressed keys; the program
/// checks every pulled sum against the join rule. With the test hook `push-after-join`, each
/// joined worker sends one more raw push: the servers refuse it (and the sums, checked by
/// the others, show it was not applied).
#[test]
fn workers_that_run_out_of_data_join_and_the_others_finish() {
    if !mpirun_available() {
        return;
    }
    let exe = build("dist_join");
    let out = mpirun_with_env(&exe, &["plain"], 2, 3, 0, 120, &["KVSTORE_TEST_FAILPOINT=push-after-join"]);
    assert_job_passed("dist_join plain, 3 workers 2 servers", &out, 3);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("ACCEPTED"), "a server applied a push after its worker joined:\n{stderr}");
    let refusals = stderr.lines().filter(|l| l.contains("test push after join: refused") && l.contains("after it joined")).count();
    assert_eq!(refusals, 3, "expected one refused push per worker:\n{stderr}");
    for workers in [3, 4] {
        let out = mpirun(&exe, &["compressed"], 2, workers, 0, 120);
        assert_job_passed(&format!("dist_join compressed, {workers} workers 2 servers"), &out, workers);
    }
}
