//! The GPU backend on the CUDA stand-in (`cuda-standin/`, test equipment executing the CUDA
//! driver API on the CPU): the stand-in's directory goes first on `LD_LIBRARY_PATH` of the
//! programs run here only, so every other test keeps seeing no driver (`ctests/gpu_absent.c`).
//!
//! - `ctests/gpu_diff.c` on 1, 2 and 4 devices: output identical to its CPU run (and with
//!   injected stream delays, so a missing wait shows);
//! - C programs of `ctests/` rebuilt with `-DDEV_CPU=2` (every array on a GPU), under
//!   AddressSanitizer: output identical to their CPU build's (MXNet's refusal of a cast
//!   across devices aside); the stand-in's device pointers fault on any host read;
//! - `ctests/gpu_nccl.c` on 1, 2 and 4 devices: the `nccl` store's results equal the `device`
//!   store's bit for bit, its sums land on the device set's root, and each of its refusals
//!   answers -1 with its message and leaves the store as it was; random sequences of calls
//!   on the `nccl` store print what the CPU stores print;
//! - faults (`CUDA_STANDIN_FAIL`): out of device memory at the call (a create) or at the next
//!   wait (an op's scratch), a faulting kernel or copy reported at the next wait on what it
//!   wrote, other work intact;
//! - the trace (`CUDA_STANDIN_TRACE`): a steady push/pull loop makes no driver call on the
//!   calling thread, allocates no pinned memory, and launches one kernel per device per push;
//!   iterations 2..N of a steady loop (`device` and `nccl` stores, dense with a 4 MiB key,
//!   row_sparse with the same rows) make no allocation or free call of any kind;
//!   row_sparse pushes of GPU values and pulls into GPU outputs run as `rsp_accumulate_float32`
//!   and `rsp_gather` launches, and only row ids come to the host (no values downloaded).
//!
//! Every run asserts that `MXGetGPUCount` equals `CUDA_STANDIN_DEVICES` (a stand-in missing
//! an entry point makes the driver look absent, which must fail here, never skip).

use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::OnceLock;

mod common;
use common::lib_dir;
use common::standin::{build, run};

fn text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn assert_ok(what: &str, out: &Output) {
    assert!(
        out.status.success(),
        "{what} failed ({}):\nstdout (tail):\n{}\nstderr:\n{}",
        out.status,
        text(out).lines().rev().take(10).collect::<Vec<_>>().join("\n"),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn gpu_standin() -> &'static Path {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| build("gpu_standin", "kv", &[]))
}

/// `MXGetGPUCount` equals the stand-in's device count, and the memory is the stand-in's.
fn assert_device_count(devices: usize) {
    let out = run(gpu_standin(), &["count"], devices, &[]);
    assert_ok("gpu_standin count", &out);
    assert!(text(&out).contains(&format!("gpus={devices} total=1073741824")), "{}", text(&out));
}

#[test]
fn gpu_diff_is_identical_to_its_cpu_run_on_1_2_and_4_devices() {
    let exe = build("gpu_diff", "kv", &["-ldl"]);
    let cpu = run(&exe, &["cpu"], 2, &[]);
    assert_ok("gpu_diff cpu", &cpu);
    for devices in [1, 2, 4] {
        assert_device_count(devices);
        let gpu = run(&exe, &["gpu"], devices, &[]);
        assert_ok(&format!("gpu_diff gpu on {devices} devices"), &gpu);
        assert!(!text(&gpu).contains("skipped"), "gpu_diff saw no GPU:\n{}", text(&gpu));
        assert!(gpu.stderr.is_empty(), "gpu_diff printed to stderr:\n{}", String::from_utf8_lossy(&gpu.stderr));
        assert_same_lines(&format!("gpu_diff on {devices} devices"), &text(&cpu), &text(&gpu));
    }
}

#[test]
fn gpu_diff_with_stream_delays_is_identical_to_its_cpu_run() {
    let exe = build("gpu_diff", "delay", &["-ldl"]);
    let cpu = run(&exe, &["cpu", "--small"], 2, &[]);
    assert_ok("gpu_diff cpu --small", &cpu);
    let gpu = run(&exe, &["gpu", "--small"], 2, &[("CUDA_STANDIN_DELAY_US", "30")]);
    assert_ok("gpu_diff gpu --small with delays", &gpu);
    assert_same_lines("gpu_diff --small with CUDA_STANDIN_DELAY_US=30", &text(&cpu), &text(&gpu));
}

#[test]
fn nccl_store_matches_the_device_store_and_refuses_what_mxnet_refuses_on_1_2_and_4_devices() {
    let exe = build("gpu_nccl", "kv", &[]);
    for devices in [1, 2, 4] {
        let out = run(&exe, &[], devices, &[]);
        assert_ok(&format!("gpu_nccl on {devices} devices"), &out);
        assert!(out.stderr.is_empty(), "gpu_nccl printed to stderr:\n{}", String::from_utf8_lossy(&out.stderr));
        let stdout = text(&out);
        // Every dtype, one to `devices` values per key, three rounds of three keys and a
        // broadcast: the count of arrays compared shows the differential ran in full.
        let want: usize = (1..=devices).map(|nv| 3 * (3 * nv + if nv == 1 { 3 } else { 0 }) + 2 * nv).sum::<usize>() * 6;
        assert!(
            stdout.contains(&format!("gpu_nccl: ok ({devices} devices, {want} arrays compared)")),
            "gpu_nccl on {devices} devices:\n{stdout}"
        );
        let refusals = stdout.lines().filter(|l| l.starts_with("refused ")).count();
        // Nine on any count, one more on a single GPU; eight more with a device set to
        // break (two GPUs), two more with GPUs outside it (four).
        let expected = match devices {
            1 => 10,
            2 => 17,
            _ => 19,
        };
        assert_eq!(refusals, expected, "gpu_nccl on {devices} devices: refusals\n{stdout}");
        assert_eq!(stdout.contains("root: every sum on gpu(0)"), devices > 1, "{stdout}");
    }
}

fn assert_same_lines(what: &str, cpu: &str, gpu: &str) {
    let diffs: Vec<String> = cpu
        .lines()
        .zip(gpu.lines())
        .enumerate()
        .filter(|(_, (c, g))| c != g)
        .take(10)
        .map(|(i, (c, g))| format!("line {}:\n  cpu: {c}\n  gpu: {g}", i + 1))
        .collect();
    assert!(
        diffs.is_empty() && cpu.lines().count() == gpu.lines().count(),
        "{what}: outputs differ ({} vs {} lines):\n{}",
        cpu.lines().count(),
        gpu.lines().count(),
        diffs.join("\n")
    );
}

/// A C program's line on GPU arrays as its CPU build prints it: the device type in printed
/// contexts is the build's, and a cast across devices is refused on GPUs (MXNet's rule)
/// where the CPU casts.
fn as_cpu_line<'a>(cpu: &'a str, gpu: &str) -> Option<&'a str> {
    let normal = gpu.replace("ctx=2:", "ctx=1:").replace("ctx=(2,", "ctx=(1,");
    if normal == cpu {
        return Some(cpu);
    }
    let refused_cast = cpu
        .strip_prefix("_copyto ")
        .and_then(|rest| rest.split_once(':'))
        .filter(|(types, _)| types.split_once("->").is_some_and(|(a, b)| a != b))
        .is_some_and(|(types, _)| gpu == format!("_copyto {types}: error"));
    refused_cast.then_some(cpu)
}

#[test]
fn c_programs_on_gpu_arrays_under_asan_match_their_cpu_runs() {
    // Not here: diff_ndarray reads GetData's pointer on the host (a crash on a GPU, as it
    // should be); diff_store pulls into outputs of another dtype across devices, which MXNet
    // refuses on GPUs.
    // diff_random: 12 of its random sequences, with calls that must fail (the stand-in runs
    // every kernel on the host).
    let programs: [(&str, &[&str]); 10] = [
        ("walkthrough", &[]),
        ("diff_dtypes", &[]),
        ("diff_ops", &[]),
        ("diff_slice_assign", &[]),
        ("diff_sparse", &[]),
        ("diff_broadcast_sparse", &[]),
        ("diff_compression", &[]),
        ("diff_parsing", &[]),
        ("diff_random", &["12", "40", "1", "bad"]),
        ("row_ids", &[]),
    ];
    let asan = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer"];
    for (name, args) in programs {
        let cpu_exe = build(name, "devcpu", &["-DDEV_CPU=1", "-lm"]);
        let gpu_exe = build(name, "devgpu_asan", &[&["-DDEV_CPU=2", "-lm"][..], &asan[..]].concat());
        let cpu = run(&cpu_exe, args, 4, &[]);
        assert_ok(&format!("{name} on cpu arrays"), &cpu);
        let gpu = run(&gpu_exe, args, 4, &[("ASAN_OPTIONS", "detect_leaks=0:abort_on_error=1")]);
        assert_ok(&format!("{name} on gpu arrays (ASan)"), &gpu);
        let (c, g) = (text(&cpu), text(&gpu));
        assert_eq!(c.lines().count(), g.lines().count(), "{name}: line counts differ");
        for (i, (cl, gl)) in c.lines().zip(g.lines()).enumerate() {
            assert!(as_cpu_line(cl, gl).is_some(), "{name} line {}:\n  cpu arrays: {cl}\n  gpu arrays: {gl}", i + 1);
        }
    }
}

/// Random sequences (`ctests/diff_random.c`) with every key's values and outputs one per
/// GPU, the layout an `nccl` store takes once its device set is fixed: the `nccl` store on 4
/// stand-in GPUs (under ASan) prints what the `local` and `device` stores print on CPU
/// arrays with the same layout (which `c_programs` compares with libmxnet.so), the store's
/// name in the header aside.
#[test]
fn nccl_store_random_sequences_print_what_the_cpu_stores_print() {
    let asan = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer"];
    let cpu_exe = build("diff_random", "devcpu", &["-DDEV_CPU=1", "-lm"]);
    let gpu_exe = build("diff_random", "devgpu_asan", &[&["-DDEV_CPU=2", "-lm"][..], &asan[..]].concat());
    let cpu = run(&cpu_exe, &["12", "60", "1", "per-device"], 4, &[]);
    assert_ok("diff_random per-device on cpu arrays", &cpu);
    let gpu = run(&gpu_exe, &["12", "60", "1", "nccl"], 4, &[("ASAN_OPTIONS", "detect_leaks=0:abort_on_error=1")]);
    assert_ok("diff_random on the nccl store (ASan)", &gpu);
    let (c, g) = (text(&cpu), text(&gpu));
    assert_eq!(g.matches("'nccl' store").count(), 12, "every sequence on the nccl store");
    assert_eq!(c.lines().count(), g.lines().count(), "line counts differ");
    for (i, (cl, gl)) in c.lines().zip(g.lines()).enumerate() {
        let gl = gl.replace("'nccl' store", if cl.contains("'local' store") { "'local' store" } else { "'device' store" });
        assert_eq!(cl, gl, "line {}", i + 1);
    }
}

#[test]
fn out_of_device_memory_fails_at_the_call_and_the_next_allocation_works() {
    for devices in [1, 2] {
        let out = run(gpu_standin(), &["alloc_fail"], devices, &[("CUDA_STANDIN_FAIL", "cuMemAlloc_v2:1")]);
        assert_ok("gpu_standin alloc_fail", &out);
    }
}

#[test]
fn a_faulting_kernel_or_copy_reaches_the_next_wait_and_other_work_goes_on() {
    for devices in [1, 2, 4] {
        for (fault, error, values) in [
            ("cuLaunchKernel:1", "CUDA_ERROR_ILLEGAL_ADDRESS", "one_key"),
            // The pull into the sum's GPU is queued behind the faulting kernel on its stream
            // (stream ordered, with the stream's work delayed: before the fault shows): the
            // failure still reaches its output.
            ("cuLaunchKernel:1", "CUDA_ERROR_ILLEGAL_ADDRESS", "gpu_out"),
            ("cuMemcpyDtoHAsync_v2:1", "CUDA_ERROR_ILLEGAL_ADDRESS", "one_key"),
            // The sum's scratch (the fused table of many keys, too big for the launch's
            // parameters, kept with the first key from its first push): out of memory at the
            // next wait.
            ("cuMemAllocAsync:1", "CUDA_ERROR_OUT_OF_MEMORY", "many_keys"),
        ] {
            let delay = if values == "gpu_out" { "3000" } else { "0" };
            let out = run(gpu_standin(), &["async_fail", error, values], devices, &[("CUDA_STANDIN_FAIL", fault), ("CUDA_STANDIN_DELAY_US", delay)]);
            assert_ok(&format!("gpu_standin async_fail with {fault} on {devices} devices"), &out);
        }
    }
}

/// One trace line's fields.
struct Call<'a> {
    tid: &'a str,
    name: &'a str,
    kernel: Option<&'a str>,
}

fn parse(line: &str) -> Option<Call<'_>> {
    let field = |key: &str| line.split(' ').find_map(|f| f.strip_prefix(key));
    Some(Call { tid: field("tid=")?, name: field("call=")?, kernel: field("kernel=") })
}

#[test]
fn a_steady_push_pull_loop_stays_off_the_calling_thread_allocates_no_pinned_memory_and_launches_once_per_device_per_call() {
    for devices in [1, 2, 4] {
        let trace = lib_dir().join(format!("gpu_standin_trace_{devices}.txt"));
        let _ = std::fs::remove_file(&trace);
        let trace_s = trace.to_string_lossy().into_owned();
        let out = run(gpu_standin(), &["trace_loop"], devices, &[("CUDA_STANDIN_TRACE", &trace_s)]);
        assert_ok("gpu_standin trace_loop", &out);
        let stdout = text(&out);
        let value = |key: &str| -> String {
            stdout.lines().find_map(|l| l.strip_prefix(key)).unwrap_or_else(|| panic!("no {key} in:\n{stdout}")).to_string()
        };
        let (from, to): (usize, usize) = (value("steady_from=").parse().unwrap(), value("steady_to=").parse().unwrap());
        let (main_tid, pushes): (String, usize) = (value("tid="), value("calls=").parse().unwrap());
        let all = std::fs::read(&trace).unwrap();
        let steady = String::from_utf8_lossy(&all[from..to]).into_owned();
        let calls: Vec<Call> = steady.lines().filter_map(parse).collect();
        assert!(!calls.is_empty(), "no driver call traced in the steady loop");
        let on_caller: Vec<&str> = calls.iter().filter(|c| c.tid == main_tid).map(|c| c.name).collect();
        assert!(on_caller.is_empty(), "{devices} devices: the calling thread called the driver: {on_caller:?}");
        let pinned: Vec<&str> = calls.iter().filter(|c| c.name.starts_with("cuMemHostAlloc") || c.name.starts_with("cuMemHostRegister")).map(|c| c.name).collect();
        assert!(pinned.is_empty(), "{devices} devices: pinned allocations in the steady loop: {pinned:?}");
        let launches: Vec<&Call> = calls.iter().filter(|c| c.name == "cuLaunchKernel").collect();
        assert!(
            launches.iter().all(|c| c.kernel.is_some_and(|k| k.trim_end_matches("_by_value") == "fused_sum" || k.trim_end_matches("_by_value") == "fused_copy")),
            "small keys are summed and copied by fused launches only"
        );
        // The store places the keys' merge buffers over the devices: each push launches
        // once on every device holding some, at least one and at most all of them, and so
        // does each pull, for its outputs beside their merge buffers.
        assert!(
            launches.len() >= 2 * pushes && launches.len() <= 2 * pushes * devices,
            "{devices} devices: {} launches for {pushes} pushes and pulls of small keys",
            launches.len()
        );
        // Small copies within a GPU are fused: with one GPU, no driver copy at all.
        let copies = calls.iter().filter(|c| c.name.starts_with("cuMemcpyDtoD") || c.name.starts_with("cuMemcpyPeer")).count();
        assert!(devices > 1 || copies == 0, "1 device: {copies} driver copies for pulls of small keys");
    }
}

/// Whether a driver call allocates or frees memory (device, stream-ordered, pinned or
/// registered host memory).
fn allocates_or_frees(name: &str) -> bool {
    ["cuMemAlloc", "cuMemFree", "cuMemHostAlloc", "cuMemHostRegister", "cuMemHostUnregister"]
        .iter()
        .any(|p| name.starts_with(p))
}

#[test]
fn iterations_2_to_n_of_a_steady_loop_allocate_nothing_on_1_2_and_4_devices() {
    // MXNet's CommDevice keeps each key's merge and copy buffers: after the first iteration
    // (which makes them, compiles the kernels and fills the staging pool) a steady loop makes
    // no allocation call of any kind, dense (48 small keys and one of 4 MiB) on the `device`
    // and `nccl` stores, and row_sparse on the `device` store (the `nccl` store is dense only)
    // with the same rows each iteration.
    for (store, stype) in [("device", "default"), ("nccl", "default"), ("device", "row_sparse")] {
        for devices in [1, 2, 4] {
            let what = format!("{store} store, {stype}, {devices} devices");
            let trace = lib_dir().join(format!("gpu_standin_steady_{store}_{stype}_{devices}.txt"));
            let _ = std::fs::remove_file(&trace);
            let trace_s = trace.to_string_lossy().into_owned();
            let out = run(gpu_standin(), &["steady", store, stype], devices, &[("CUDA_STANDIN_TRACE", &trace_s)]);
            assert_ok(&format!("gpu_standin steady ({what})"), &out);
            let stdout = text(&out);
            let value = |key: &str| -> String {
                stdout.lines().find_map(|l| l.strip_prefix(key)).unwrap_or_else(|| panic!("no {key} in:\n{stdout}")).to_string()
            };
            let (from, to): (usize, usize) = (value("steady_from=").parse().unwrap(), value("steady_to=").parse().unwrap());
            let all = std::fs::read(&trace).unwrap();
            let before = String::from_utf8_lossy(&all[..from]).into_owned();
            let steady = String::from_utf8_lossy(&all[from..to]).into_owned();
            // The warm-up did allocate (so the check below looks at real calls).
            assert!(before.lines().filter_map(parse).any(|c| allocates_or_frees(c.name)), "{what}: no allocation traced at all");
            // Kernels are looked up in their own module: no lookup answered with an error
            // (compute-sanitizer reports every such answer of a real driver).
            let missed: Vec<&str> = before.lines().filter(|l| l.contains("call=cuModuleGetFunction ") && !l.contains(" result=0")).collect();
            assert!(missed.is_empty(), "{what}: kernel lookups that failed: {missed:?}");
            let calls: Vec<Call> = steady.lines().filter_map(parse).collect();
            assert!(calls.iter().any(|c| c.name == "cuLaunchKernel" || c.name.starts_with("cuMemcpy")), "{what}: no GPU work traced in iterations 2..N");
            let allocs: Vec<&str> = calls.iter().filter(|c| allocates_or_frees(c.name)).map(|c| c.name).collect();
            assert!(allocs.is_empty(), "{what}: iterations 2..N allocated or freed: {allocs:?}");
        }
    }
}

#[test]
fn row_sparse_sums_and_pulls_on_gpus_run_as_kernels_and_download_only_row_ids() {
    for devices in [1, 2, 4] {
        let trace = lib_dir().join(format!("gpu_standin_trace_rsp_{devices}.txt"));
        let _ = std::fs::remove_file(&trace);
        let trace_s = trace.to_string_lossy().into_owned();
        let out = run(gpu_standin(), &["trace_rsp"], devices, &[("CUDA_STANDIN_TRACE", &trace_s)]);
        assert_ok("gpu_standin trace_rsp", &out);
        let stdout = text(&out);
        let value = |key: &str| -> String {
            stdout.lines().find_map(|l| l.strip_prefix(key)).unwrap_or_else(|| panic!("no {key} in:\n{stdout}")).to_string()
        };
        let (from, to): (usize, usize) = (value("steady_from=").parse().unwrap(), value("steady_to=").parse().unwrap());
        let id_bytes: usize = value("id_bytes=").parse().unwrap();
        let all = std::fs::read(&trace).unwrap();
        let traced = String::from_utf8_lossy(&all[from..to]).into_owned();
        let calls: Vec<(Call, usize)> = traced
            .lines()
            .filter_map(|l| {
                let bytes = l.split(' ').find_map(|f| f.strip_prefix("bytes=")).and_then(|b| b.parse().ok()).unwrap_or(0);
                parse(l).map(|c| (c, bytes))
            })
            .collect();
        let kernels: Vec<&str> = calls.iter().filter(|(c, _)| c.name == "cuLaunchKernel").filter_map(|(c, _)| c.kernel).collect();
        assert!(kernels.contains(&"rsp_accumulate_float32"), "{devices} devices: no row_sparse sum kernel: {kernels:?}");
        assert!(kernels.contains(&"rsp_gather"), "{devices} devices: no row_sparse gather kernel: {kernels:?}");
        // Downloads carry row ids only (at most `id_bytes` each): never a value's rows.
        let downloads: Vec<usize> = calls.iter().filter(|(c, _)| c.name.starts_with("cuMemcpyDtoH")).map(|(_, b)| *b).collect();
        assert!(!downloads.is_empty(), "{devices} devices: no row ids downloaded");
        assert!(
            downloads.iter().all(|&b| b <= id_bytes),
            "{devices} devices: values downloaded to the host: {downloads:?}"
        );
    }
}
