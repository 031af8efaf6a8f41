//! GPU work in the profiler's Chrome trace, on the CUDA stand-in: `ctests/gpu_profiler.c` runs
//! a push/pull round on 2 GPUs (a small and a big key summed by `fused_sum`, or the big one by
//! `sum_out_float32` when its pull joined it,
//! a 2-bit compressed key, pulls into GPU and pageable host outputs, an upload) once with the
//! profiler running and once with it stopped. Checked against the program's arrays and the
//! stand-in's own trace of the driver calls (`CUDA_STANDIN_TRACE`):
//!
//! - a process per GPU (`gpu/0`, `gpu/1`) with a row per stream used;
//! - the copies and memsets on the rows are exactly the driver's (device, kind, bytes), the
//!   upload and the host pull carry the arrays' sizes, every other copy an array's size;
//! - the kernels on the rows are exactly the launches (device, name, grid, block), in launch
//!   order per device, with the bytes and elements of what they write;
//! - each item carries `enqueued_us`, the host time of its call, no later than its start;
//! - spans on one stream never overlap and come in order; each kernel lies within its engine
//!   op's span (`gpu_sum`, `gpu_compressed_sum`), which are in the trace with `gpu_copy`;
//! - with the profiler stopped, nothing GPU is recorded and no timing event is created.

mod common;
use common::lib_dir;
use common::standin::{build, run};
use serde_json::Value;
use std::collections::BTreeMap;
use std::process::Output;

/// A `B`/`E` span of the trace.
#[derive(Debug, Clone)]
struct Span {
    process: String,
    row: String,
    name: String,
    start: f64,
    end: f64,
    args: Value,
}

impl Span {
    fn int(&self, key: &str) -> i64 {
        self.args[key].as_i64().unwrap_or_else(|| panic!("{} has no integer {key}: {}", self.name, self.args))
    }

    fn text(&self, key: &str) -> &str {
        self.args[key].as_str().unwrap_or_else(|| panic!("{} has no text {key}: {}", self.name, self.args))
    }

    /// The device of a span in a `gpu/N` process.
    fn device(&self) -> Option<i64> {
        self.process.strip_prefix("gpu/").map(|d| d.parse().unwrap())
    }
}

/// The trace's spans (in file order per row) and the deepest nesting seen per row.
fn spans(path: &std::path::Path) -> (Vec<Span>, BTreeMap<String, usize>) {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let trace: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}\n{text}", path.display()));
    let events = trace["traceEvents"].as_array().expect("traceEvents");
    let mut processes = BTreeMap::new();
    let mut rows = BTreeMap::new();
    for e in events.iter().filter(|e| e["ph"] == "M") {
        let name = e["args"]["name"].as_str().unwrap().to_string();
        match e["name"].as_str() {
            Some("process_name") => processes.insert(e["pid"].as_u64().unwrap(), name),
            Some("thread_name") => rows.insert((e["pid"].as_u64().unwrap(), e["tid"].as_u64().unwrap()), name),
            other => panic!("unexpected metadata {other:?}"),
        };
    }
    let mut open: BTreeMap<(u64, u64), Vec<&Value>> = BTreeMap::new();
    let mut depth: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = Vec::new();
    for e in events {
        let ph = e["ph"].as_str().unwrap();
        if ph != "B" && ph != "E" {
            continue;
        }
        let key = (e["pid"].as_u64().unwrap(), e["tid"].as_u64().unwrap());
        let row = rows.get(&key).cloned().unwrap_or_else(|| panic!("row {key:?} has no thread_name"));
        let stack = open.entry(key).or_default();
        if ph == "B" {
            stack.push(e);
            let d = depth.entry(row).or_default();
            *d = (*d).max(stack.len());
            continue;
        }
        let b = stack.pop().unwrap_or_else(|| panic!("an E without its B on {row}: {e}"));
        assert_eq!(b["name"], e["name"], "B/E pairs nest on {row}");
        out.push(Span {
            process: processes[&key.0].clone(),
            row,
            name: b["name"].as_str().unwrap().to_string(),
            start: b["ts"].as_f64().unwrap(),
            end: e["ts"].as_f64().unwrap(),
            args: b["args"].clone(),
        });
    }
    assert!(open.values().all(Vec::is_empty), "unclosed spans in {}", path.display());
    // Spans close in end order; put each row's back in start order (file order of the Bs).
    out.sort_by(|a, b| (&a.process, &a.row).cmp(&(&b.process, &b.row)).then(a.start.total_cmp(&b.start)));
    (out, depth)
}

/// One line of the stand-in's trace, as key=value fields.
fn driver_calls(trace: &[u8], from: usize, to: usize) -> Vec<BTreeMap<String, String>> {
    // Whole lines only: a phase's offsets are read while other threads may be writing.
    String::from_utf8_lossy(&trace[from..to])
        .lines()
        .filter(|l| l.starts_with("standin ") && l.contains(" call="))
        .map(|l| l.split(' ').filter_map(|f| f.split_once('=')).map(|(k, v)| (k.to_string(), v.to_string())).collect())
        .collect()
}

fn value(stdout: &str, key: &str) -> usize {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
        .unwrap_or_else(|| panic!("no {key}= in:\n{stdout}"))
        .parse()
        .unwrap()
}

fn assert_ok(out: &Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success() && stdout.contains("gpu_profiler: ok"),
        "gpu_profiler failed ({}):\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// What a driver copy or memset is called in the trace.
fn copy_name(call: &str) -> Option<&'static str> {
    Some(match call {
        "cuMemcpyHtoDAsync_v2" => "copy HtoD",
        "cuMemcpyDtoHAsync_v2" => "copy DtoH",
        "cuMemcpyDtoDAsync_v2" => "copy DtoD",
        "cuMemcpyPeerAsync" => "copy DtoD peer",
        "cuMemsetD8Async" | "cuMemsetD32Async" => "memset",
        _ => return None,
    })
}

#[test]
fn gpu_copies_and_kernels_appear_per_stream_with_bytes_timed_by_events_and_only_while_profiling() {
    let exe = build("gpu_profiler", "kv", &[]);
    let dir = lib_dir();
    let (on, off, standin) = (dir.join("gpu_profiler_on.json"), dir.join("gpu_profiler_off.json"), dir.join("gpu_profiler_standin.txt"));
    for f in [&on, &off, &standin] {
        let _ = std::fs::remove_file(f);
    }
    let args = [on.to_str().unwrap(), off.to_str().unwrap()];
    let stdout = assert_ok(&run(&exe, &args, 2, &[("CUDA_STANDIN_TRACE", standin.to_str().unwrap())]));
    let (small, big, compressed) = (value(&stdout, "small_bytes") as i64, value(&stdout, "big_bytes") as i64, value(&stdout, "compressed_bytes") as i64);
    // MXNet's 2-bit codes: 16 values per 32-bit word.
    let packed = (compressed / 4 + 15) / 16 * 4;
    let driver = std::fs::read(&standin).unwrap();
    let on_calls = driver_calls(&driver, value(&stdout, "on_from"), value(&stdout, "on_to"));
    let off_calls = driver_calls(&driver, value(&stdout, "off_from"), value(&stdout, "off_to"));

    let (all, depth) = spans(&on);
    let gpu: Vec<&Span> = all.iter().filter(|s| s.device().is_some()).collect();
    assert!(!gpu.is_empty(), "no GPU span in the trace");

    // A process per GPU, a row per stream, named for its device.
    for row in ["gpu(0) stream 0 (compute)", "gpu(1) stream 0 (compute)", "gpu(0) stream 1 (host to device)"] {
        assert!(gpu.iter().any(|s| s.row == row), "no row {row:?}");
    }
    assert!(gpu.iter().any(|s| s.row.ends_with("stream 2 (device to host)")), "no device to host row");
    for s in &gpu {
        let d = s.device().unwrap();
        assert!(s.row.starts_with(&format!("gpu({d}) stream ")), "{} on row {:?} of process {}", s.name, s.row, s.process);
    }

    // Spans on one stream never overlap (no nesting) and come in order.
    let mut by_row: BTreeMap<&str, Vec<&Span>> = BTreeMap::new();
    for s in &gpu {
        by_row.entry(&s.row).or_default().push(s);
    }
    for (row, list) in &by_row {
        assert_eq!(depth[*row], 1, "{row}: spans overlap");
        for w in list.windows(2) {
            assert!(w[0].start <= w[0].end && w[0].end <= w[1].start, "{row}: {:?} and {:?} overlap or are out of order", w[0], w[1]);
        }
    }

    // Kernels: exactly the launches, in launch order per device.
    let mut launched: Vec<(i64, String, i64, i64)> = on_calls
        .iter()
        .filter(|c| c["call"] == "cuLaunchKernel")
        .map(|c| {
            let x = |k: &str| c[k].split('x').next().unwrap().parse::<i64>().unwrap();
            (c["dev"].parse().unwrap(), format!("kernel {}", c["kernel"]), x("grid"), x("block"))
        })
        .collect();
    let mut shown: Vec<(i64, String, i64, i64)> =
        gpu.iter().filter(|s| s.name.starts_with("kernel ")).map(|s| (s.device().unwrap(), s.name.clone(), s.int("grid"), s.int("block"))).collect();
    for d in [0, 1] {
        let order = |v: &[(i64, String, i64, i64)]| v.iter().filter(|k| k.0 == d).map(|k| k.1.clone()).collect::<Vec<_>>();
        assert_eq!(order(&shown), order(&launched), "gpu({d}): the kernels in the trace are not the launches, in order");
    }
    launched.sort();
    shown.sort();
    assert_eq!(shown, launched, "kernels (device, name, grid, block)");
    let names: Vec<&str> = launched.iter().map(|k| k.1.as_str()).collect();
    // A fused launch's table small enough for its parameters goes by value (`_by_value`).
    let family = |name: &str| name.trim_end_matches("_by_value").to_string();
    for k in ["kernel fused_sum", "kernel fused_copy", "kernel quantize_2bit", "kernel dequantize_2bit"] {
        assert!(names.iter().any(|n| family(n) == k), "{k} was not launched: {names:?}");
    }
    // The big key's sum: in its GPU's fused launch (with the small key, if on the same GPU),
    // or by a launch of its own writing the outputs of a pull that joined it.
    let big_fused = gpu.iter().any(|s| family(&s.name) == "kernel fused_sum" && [big, small + big].contains(&s.int("bytes")));
    assert!(big_fused || names.contains(&"kernel sum_out_float32"), "no big sum: {names:?}");
    for s in gpu.iter().filter(|s| s.name.starts_with("kernel ")) {
        let (bytes, elements) = (s.int("bytes"), s.int("elements"));
        match family(&s.name).as_str() {
            "kernel sum_float32" => assert_eq!((bytes, elements), (big, big / 4), "{s:?}"),
            "kernel sum_out_float32" => assert!(bytes > big && bytes % big == 0 && elements == bytes / 4, "{s:?}"),
            "kernel fused_sum" => assert!([small, big, small + big].contains(&bytes) && elements == bytes / 4, "{s:?}"),
            // Pull outputs beside their merge buffers, moved as 8-, 4- or 1-byte words: each
            // launch copies whole arrays (the big key's when its pull did not join its sum).
            "kernel fused_copy" => assert!(
                [small, compressed, 2 * small, 2 * compressed, small + compressed, big, 2 * big].contains(&bytes)
                    && [8, 4, 1].iter().any(|w| elements * w == bytes),
                "{s:?}"
            ),
            "kernel quantize_2bit" => assert_eq!((bytes, elements), (packed, compressed / 4), "{s:?}"),
            "kernel dequantize_2bit" => assert_eq!((bytes, elements), (compressed, compressed / 4), "{s:?}"),
            other => panic!("unexpected kernel {other}"),
        }
    }

    // Copies and memsets: exactly the driver's, with the arrays' sizes.
    let mut enqueued: Vec<(i64, &str, i64)> = on_calls
        .iter()
        .filter_map(|c| {
            let name = copy_name(&c["call"])?;
            Some((c["dev"].parse().unwrap(), name, c["bytes"].parse().unwrap()))
        })
        .collect();
    let mut copies: Vec<(i64, &str, i64)> = gpu
        .iter()
        .filter(|s| s.name.starts_with("copy ") || s.name == "memset")
        .map(|s| (s.device().unwrap(), s.name.as_str(), s.int("bytes")))
        .collect();
    enqueued.sort();
    copies.sort();
    assert_eq!(copies, enqueued, "copies (device, kind, bytes)");
    let arrays = [small, big, compressed, packed];
    for s in gpu.iter().filter(|s| s.name.starts_with("copy ")) {
        if s.name == "copy HtoD" && s.row.contains("(compute)") {
            // A fused sum's table, uploaded before its launch.
            assert!(s.int("bytes") > 0 && s.text("from") == "cpu_pinned(0)", "{s:?}");
            continue;
        }
        assert!(arrays.contains(&s.int("bytes")), "{} of {} bytes is no array's size: {s:?}", s.name, s.int("bytes"));
        assert!(s.text("to").starts_with("gpu(") || s.text("to") == "cpu_pinned(0)", "{s:?}");
    }
    let has = |name: &str, row: &str, bytes: i64| gpu.iter().any(|s| s.name == name && s.row.contains(row) && s.int("bytes") == bytes);
    assert!(has("copy HtoD", "gpu(0) stream 1 (host to device)", big), "the upload");
    assert!(has("copy DtoH", "stream 2 (device to host)", big), "the pull into host memory");
    assert!(has("copy DtoD peer", "(compute)", small) && has("copy DtoD peer", "(compute)", big), "the push's sources");
    assert!(has("copy DtoD peer", "(compute)", packed), "the compressed codes");

    // The engine ops' rows, and each kernel within its op's span (give or take the
    // reference's error, at most half its calibration window: a few µs unless descheduled).
    let engine: Vec<&Span> = all.iter().filter(|s| s.process == "engine").collect();
    for op in ["gpu_copy", "gpu_sum", "gpu_compressed_sum"] {
        let rows: Vec<&&Span> = engine.iter().filter(|s| s.name == op).collect();
        assert!(!rows.is_empty(), "no {op} row in the engine");
        for s in rows {
            assert!(s.int("bytes") > 0 && s.text("context").starts_with("gpu("), "{s:?}");
        }
    }
    const SLACK_US: f64 = 5000.0;
    for k in gpu.iter().filter(|s| s.name.starts_with("kernel ")) {
        let op = match family(&k.name).as_str() {
            n if n.contains("quantize") => "gpu_compressed_sum",
            "kernel fused_copy" => "gpu_copy",
            _ => "gpu_sum",
        };
        assert!(
            engine.iter().any(|e| e.name == op && e.start - SLACK_US <= k.start && k.end <= e.end + SLACK_US),
            "{} [{}, {}] lies in no {op} span: {:?}",
            k.name,
            k.start,
            k.end,
            engine.iter().filter(|e| e.name == op).map(|e| (e.start, e.end)).collect::<Vec<_>>()
        );
    }
    // Each item carries the host time its call was made (the trace's clock): before the GPU
    // started it, give or take the same error, and not long before (the run takes seconds).
    for s in &gpu {
        let enqueued = s.int("enqueued_us") as f64;
        assert!(enqueued <= s.start + SLACK_US, "{} enqueued at {enqueued} after it started: {s:?}", s.name);
        assert!(enqueued >= s.start - 60e6, "{} enqueued at {enqueued}, long before it started: {s:?}", s.name);
    }
    // Each span had its two timing events.
    let timing_events = |calls: &[BTreeMap<String, String>]| {
        calls.iter().filter(|c| c["call"] == "cuEventCreate" && c.get("flags").is_some_and(|f| f == "0")).count()
    };
    assert!(timing_events(&on_calls) >= 2 * gpu.len(), "{} timing events for {} spans", timing_events(&on_calls), gpu.len());

    // Stopped: nothing GPU recorded, no timing event created, no time read.
    let (stopped, _) = spans(&off);
    let recorded: Vec<&Span> = stopped.iter().filter(|s| s.device().is_some() || s.name.starts_with("gpu_")).collect();
    assert!(recorded.is_empty(), "recorded while stopped: {recorded:?}");
    assert!(!std::fs::read_to_string(&off).unwrap().contains("gpu/"), "a GPU process while stopped");
    assert!(off_calls.iter().any(|c| c["call"] == "cuLaunchKernel"), "the stopped round ran no kernel");
    assert_eq!(timing_events(&off_calls), 0, "timing events created while stopped");
    assert!(!off_calls.iter().any(|c| c["call"] == "cuEventElapsedTime"), "times read while stopped");
}
