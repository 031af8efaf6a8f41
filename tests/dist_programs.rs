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

/// The settings that put `devices` CUDA stand-in GPUs (scripts/cuda-standin.sh) and NVRTC
/// under every process of a job.
fn standin_env(devices: usize) -> Vec<String> {
    let standin = script_output("scripts/cuda-standin.sh");
    let nvrtc = std::env::var("KVSTORE_NVRTC_PATH").unwrap_or_else(|_| script_output("scripts/nvrtc-wheel.sh"));
    let nvrtc_dir = Path::new(&nvrtc).parent().map(|d| d.display().to_string()).unwrap_or_default();
    vec![format!("LD_LIBRARY_PATH={standin}:{nvrtc_dir}"), format!("CUDA_STANDIN_DEVICES={devices}"), format!("KVSTORE_NVRTC_PATH={nvrtc}")]
}

#[test]
fn dist_device_sync_with_gpu_values_on_the_cuda_standin() {
    if !mpirun_available() {
        return;
    }
    // Every array of the program on gpu(i), three stand-in GPUs per process (docs/gpu.md).
    let exe = compile_with("dist_store", "-gpu", &["-DDEV_CPU=2"]);
    let env = standin_env(3);
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

/// The workers' transcripts of one `dist_diff_random` job (`worker-<rank>.txt`, in rank
/// order), written under a fresh directory.
fn random_transcripts(exe: &Path, seed: &str, store: &str, env: &[&str]) -> Vec<String> {
    static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = RUNS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let dir = std::env::temp_dir().join(format!("kvstore-random-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("make the output directory");
    let out_setting = format!("DIST_DIFF_OUT={}", dir.display());
    let mut settings = vec![out_setting.as_str(), "KVSTORE_DIST_CHUNK_BYTES=2048"];
    settings.extend_from_slice(env);
    let out = mpirun_with_env(exe, &[seed, "80", store], 1, 2, 0, 150, &settings);
    let what = format!("dist_diff_random {seed} on {store} ({})", exe.display());
    assert!(out.status.success(), "{what} failed ({}):\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    let transcripts: Vec<String> = (0..2)
        .map(|rank| std::fs::read_to_string(dir.join(format!("worker-{rank}.txt"))).unwrap_or_else(|e| panic!("{what}: worker {rank}: {e}")))
        .collect();
    let _ = std::fs::remove_dir_all(&dir);
    for t in &transcripts {
        assert!(t.trim_end().ends_with("done") && t.contains("step "), "{what}: an unfinished transcript:\n{t}");
    }
    transcripts
}

/// Random sequences of calls (`ctests/dist_diff_random.c`, which `scripts/dist-diff` compares
/// with ps-lite on CPU arrays) on a dist_device_sync and a dist_sync store with every array on
/// the CUDA stand-in's GPUs: each worker's transcript is the one its CPU run prints.
#[test]
fn random_sequences_on_gpu_values_print_what_cpu_values_print_on_the_cuda_standin() {
    if !mpirun_available() {
        return;
    }
    let cpu = build("dist_diff_random");
    let gpu = compile_with("dist_diff_random", "-gpu", &["-DDEV_CPU=2"]);
    let env = standin_env(4);
    let env: Vec<&str> = env.iter().map(String::as_str).collect();
    for (seed, store) in [("13", "dist_device_sync"), ("14", "dist_device_sync"), ("5", "dist_device_sync"), ("3", "dist_sync")] {
        let on_cpu = random_transcripts(&cpu, seed, store, &[]);
        let on_gpu = random_transcripts(&gpu, seed, store, &env);
        for (rank, (c, g)) in on_cpu.iter().zip(&on_gpu).enumerate() {
            if c != g {
                let line = c.lines().zip(g.lines()).position(|(a, b)| a != b).unwrap_or(0);
                panic!("seed {seed} on {store}, worker {rank}: GPU values print otherwise from line {}:\n cpu: {}\n gpu: {}", line + 1, c.lines().nth(line).unwrap_or(""), g.lines().nth(line).unwrap_or(""));
            }
        }
    }
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

/// A signal sent to one process of a `dist_stall` job: `target` is its pid file's stem
/// ("server-1", "worker-0"), `resume_after` sends SIGCONT that long after.
struct Fault {
    target: &'static str,
    signal: &'static str,
    resume_after: Option<Duration>,
}

/// What a `dist_stall` job did.
struct StallRun {
    out: Output,
    /// From the fault's signal to the launcher's exit.
    after_signal: Duration,
    /// Every process of the job, by pid.
    pids: Vec<u32>,
}

impl StallRun {
    fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.out.stderr).into_owned()
    }

    /// The processes of the job still alive (zombies, dead but not yet reaped by whoever
    /// inherited them, do not count).
    fn left(&self) -> Vec<u32> {
        let alive = |pid: u32| {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| s.rsplit(')').next().is_some_and(|rest| !rest.trim_start().starts_with('Z')))
        };
        let deadline = Instant::now() + Duration::from_secs(3);
        loop {
            let left: Vec<u32> = self.pids.iter().copied().filter(|&p| alive(p)).collect();
            if left.is_empty() || Instant::now() > deadline {
                return left;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// This machine's name, as MPI's processor name reports it.
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").expect("read the host name").trim().to_string()
}

/// Runs `ctests/dist_stall.c` (2 servers, 2 workers) through `scripts/kvstore-launch` with
/// `settings` (`--env` values), and applies `fault` once every process has written its pid
/// (the workers after their first round: mid-job).
fn stall_job(settings: &[&str], fault: Option<Fault>) -> StallRun {
    stall_job_with(&[], settings, fault)
}

/// As `stall_job`, with `args` to the program.
fn stall_job_with(args: &[&str], settings: &[&str], fault: Option<Fault>) -> StallRun {
    static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let exe = build("dist_stall");
    let dir = std::env::temp_dir().join(format!("kvstore-stall-{}-{}", std::process::id(), RUNS.fetch_add(1, std::sync::atomic::Ordering::SeqCst)));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("make the pid directory");
    let mut cmd = Command::new("python3");
    cmd.arg(root().join("scripts/kvstore-launch")).args(["-n", "2", "-s", "2", "--launcher", "local", "--timeout", "120"]);
    let dir_setting = format!("DIST_STALL_DIR={}", dir.display());
    for s in ["MXNET_KVSTORE_BIGARRAY_BOUND=100", "KVSTORE_DIST_EXIT_TIMEOUT=60", &dir_setting].iter().chain(settings) {
        cmd.args(["--env", s]);
    }
    cmd.arg(&exe).args(args).env_remove("DMLC_ROLE").env_remove("KVSTORE_DIST_TIMEOUT");
    cmd.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().expect("run scripts/kvstore-launch");
    let pid_files = ["server-0", "server-1", "worker-0", "worker-1"].map(|stem| dir.join(format!("{stem}.pid")));
    let (stdout, stderr) = (child.stdout.take().expect("piped"), child.stderr.take().expect("piped"));
    let read = |mut r: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = r.read_to_end(&mut v);
            v
        })
    };
    let (stdout, stderr) = (read(Box::new(stdout)), read(Box::new(stderr)));
    let started = Instant::now();
    let mut pids = Vec::new();
    let mut signalled = None;
    while pids.len() < pid_files.len() && child.try_wait().expect("poll the launcher").is_none() && started.elapsed() < Duration::from_secs(100) {
        pids = pid_files.iter().filter_map(|f| std::fs::read_to_string(f).ok()?.trim().parse::<u32>().ok()).collect();
        std::thread::sleep(Duration::from_millis(20));
    }
    if let Some(fault) = fault {
        assert_eq!(pids.len(), pid_files.len(), "the job ended (or hung) before every process wrote its pid");
        std::thread::sleep(Duration::from_millis(200));
        let pid = std::fs::read_to_string(dir.join(format!("{}.pid", fault.target))).expect("the target's pid").trim().to_string();
        let kill = |signal: &str| assert!(Command::new("kill").args([&format!("-{signal}"), &pid]).status().is_ok_and(|s| s.success()), "kill -{signal} {pid}");
        kill(fault.signal);
        signalled = Some(Instant::now());
        if let Some(after) = fault.resume_after {
            std::thread::sleep(after);
            kill("CONT");
        }
    }
    let status = child.wait().expect("wait for the launcher");
    let after_signal = signalled.map_or(Duration::ZERO, |t| t.elapsed());
    let out = Output { status, stdout: stdout.join().unwrap_or_default(), stderr: stderr.join().unwrap_or_default() };
    let _ = std::fs::remove_dir_all(&dir);
    StallRun { out, after_signal, pids }
}

/// The `hash` lines of a passed `dist_stall` job (the same on both workers), once.
fn stall_hashes(what: &str, run: &StallRun) -> Vec<String> {
    reproducible_hashes(what, &run.out, 2)
}

/// A server stopped (SIGSTOP, never resumed) mid-job for longer than `KVSTORE_DIST_TIMEOUT`
/// (3 s): the workers waiting for its answers end the job — every rank, the stopped one too —
/// within the timeout and a few seconds, naming the server, its host and what they waited
/// for. Without the timeout the job would hang until mpirun's `--timeout` (120 s).
#[test]
fn a_stopped_server_ends_the_job_after_the_timeout_naming_it() {
    if !mpirun_available() {
        return;
    }
    let run = stall_job(&["KVSTORE_DIST_TIMEOUT=3"], Some(Fault { target: "server-1", signal: "STOP", resume_after: None }));
    let stderr = run.stderr();
    assert!(!run.out.status.success(), "the job with a stopped server exited 0:\n{stderr}");
    assert!(run.after_signal < Duration::from_secs(3 + 7), "the job took {:?} after the stop to end:\n{stderr}", run.after_signal);
    let named = format!("no message from server 1 (MPI rank 1) on host {} for ", hostname());
    let line = stderr.lines().find(|l| l.contains(&named)).unwrap_or_else(|| panic!("no line naming the stopped server ({named}):\n{stderr}"));
    assert!(line.contains("KVSTORE_DIST_TIMEOUT=3 s") && line.contains("while waiting for the "), "the line does not say what was waited for: {line}");
    assert!(!String::from_utf8_lossy(&run.out.stdout).contains(" ok"), "a worker finished");
    assert_eq!(run.left(), Vec::<u32>::new(), "processes of the job are still running");
}

/// A worker stopped mid-job: the server whose sync round (or barrier) waits for it ends the
/// job, naming the worker; the other worker, waiting for a live server, does not.
#[test]
fn a_stopped_worker_ends_the_job_after_the_timeout_naming_it() {
    if !mpirun_available() {
        return;
    }
    let run = stall_job(&["KVSTORE_DIST_TIMEOUT=3"], Some(Fault { target: "worker-1", signal: "STOP", resume_after: None }));
    let stderr = run.stderr();
    assert!(!run.out.status.success(), "the job with a stopped worker exited 0:\n{stderr}");
    assert!(run.after_signal < Duration::from_secs(3 + 7), "the job took {:?} after the stop to end:\n{stderr}", run.after_signal);
    let named = format!("no message from worker 1 (MPI rank 3) on host {} for ", hostname());
    let line = stderr.lines().find(|l| l.contains(&named)).unwrap_or_else(|| panic!("no line naming the stopped worker ({named}):\n{stderr}"));
    assert!(line.starts_with("libkvstore: server "), "not a server's report: {line}");
    assert!(line.contains("while waiting for its push of key ") || line.contains("while waiting for it to reach the worker barrier"), "{line}");
    assert!(!stderr.contains("no message from server"), "a live server was reported silent:\n{stderr}");
    assert_eq!(run.left(), Vec::<u32>::new(), "processes of the job are still running");
}

/// Stalls shorter than the timeout (a worker, then a server, stopped for 2 s with
/// `KVSTORE_DIST_TIMEOUT=6`) are ridden out: the job passes with the same bits as an
/// undisturbed run. (The two tests above are the control: the same stop, longer than the
/// timeout, ends the job.)
#[test]
fn a_stall_shorter_than_the_timeout_changes_nothing() {
    if !mpirun_available() {
        return;
    }
    let quiet = stall_hashes("dist_stall undisturbed", &stall_job(&["KVSTORE_DIST_TIMEOUT=6"], None));
    for target in ["worker-1", "server-0"] {
        let run = stall_job(&["KVSTORE_DIST_TIMEOUT=6"], Some(Fault { target, signal: "STOP", resume_after: Some(Duration::from_secs(2)) }));
        let stalled = stall_hashes(&format!("dist_stall with {target} stopped for 2 s"), &run);
        assert_eq!(quiet, stalled, "{target} stopped for 2 s: the pulls differ from an undisturbed run");
    }
}

/// Busy peers are not silent ones: with `KVSTORE_DIST_TIMEOUT=2`, a server whose updater
/// computes for 5 s (its receiver waits for it meanwhile) and a worker that computes for 5 s
/// before a push (the servers' round waits for it) keep their heartbeats going; the job passes
/// with the same bits as without the long phases.
#[test]
fn busy_peers_are_not_mistaken_for_silent_ones() {
    if !mpirun_available() {
        return;
    }
    let (quick, busy) = (stall_job_with(&["busy", "0"], &["KVSTORE_DIST_TIMEOUT=2"], None), stall_job_with(&["busy", "5"], &["KVSTORE_DIST_TIMEOUT=2"], None));
    let quick = stall_hashes("dist_stall busy 0", &quick);
    let slow = stall_hashes("dist_stall busy 5 (phases of 5 s, KVSTORE_DIST_TIMEOUT=2)", &busy);
    assert_eq!(quick, slow, "long update and compute phases changed the pulls");
}

/// A killed server ends the job within seconds (Open MPI sees the death), and the first line
/// on stderr is the launcher's, naming the rank, its role and host, before Open MPI's.
#[test]
fn a_killed_server_ends_the_job_at_once_and_is_named_first() {
    if !mpirun_available() {
        return;
    }
    let run = stall_job(&[], Some(Fault { target: "server-1", signal: "KILL", resume_after: None }));
    let stderr = run.stderr();
    assert!(!run.out.status.success(), "the job with a killed server exited 0:\n{stderr}");
    assert!(run.after_signal < Duration::from_secs(10), "the job took {:?} after the kill to end:\n{stderr}", run.after_signal);
    let first = stderr.lines().next().unwrap_or_default();
    let want = format!("kvstore-launch: rank 1 (server 1) on host {} was killed by signal 9", hostname());
    assert!(first.starts_with(&want), "the first line does not name the killed server ({want}):\n{stderr}");
    assert_eq!(run.left(), Vec::<u32>::new(), "processes of the job are still running");
}
