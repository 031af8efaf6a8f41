//! Host-side GPU logic that needs no GPU: merge-buffer placement against the real libstdc++
//! (`tests/gpu/placement_oracle.cpp`, built with the system C++ compiler), and the library's
//! behaviour on a machine without a CUDA driver (`ctests/gpu_absent.c`, stderr must be empty).

use kvstore::gpu::placement::{libstdcxx_sort, MergePlacement, StdUnorderedIntMap};
use kvstore::{Context, DeviceType};
use std::io::Write;
use std::process::{Command, Stdio};

mod common;
use common::{lib_dir, root, Rng};

enum Op {
    Init(i32, u64),
    Place(Vec<Context>),
}

fn random_case(rng: &mut Rng) -> Vec<Op> {
    let mut ops = Vec::new();
    let n_keys = 1 + rng.below(60) as i32;
    // Few distinct sizes, so that ties (where std::sort's instability shows) are common.
    let sizes: Vec<u64> = (0..1 + rng.below(5)).map(|_| 1 + rng.below(1 << 20)).collect();
    let max_devs = if rng.below(4) == 0 { 20 } else { 8 };
    let n_devs = 1 + rng.below(max_devs);
    let dev_pool: Vec<Context> = (0..n_devs)
        .map(|_| {
            let t = if rng.below(5) == 0 { DeviceType::Cpu } else { DeviceType::Gpu };
            Context { dev_type: t, dev_id: rng.below(16) as i32 }
        })
        .collect();
    let mut key = 0;
    for round in 0..1 + rng.below(3) {
        let batch = if round == 0 { n_keys } else { 1 + rng.below(10) as i32 };
        for _ in 0..batch {
            ops.push(Op::Init(key, sizes[rng.below(sizes.len() as u64) as usize]));
            key += 1;
        }
        let mut devs = dev_pool.clone();
        // Rotate so that reruns see the devices in another order.
        let r = rng.below(devs.len() as u64) as usize;
        devs.rotate_left(r);
        ops.push(Op::Place(devs));
    }
    ops
}

fn build_oracle() -> std::path::PathBuf {
    let exe = lib_dir().join("placement_oracle");
    let out = Command::new("c++")
        .args(["-std=c++11", "-O1", "-Wall", "-Werror"])
        .arg(root().join("tests/gpu/placement_oracle.cpp"))
        .arg("-o")
        .arg(&exe)
        .output()
        .expect("run c++");
    assert!(out.status.success(), "building the oracle failed:\n{}", String::from_utf8_lossy(&out.stderr));
    exe
}

#[test]
fn merge_buffer_placement_matches_libstdcxx_on_random_stores() {
    let mut rng = Rng(0x9e3779b97f4a7c15);
    let cases: Vec<Vec<Op>> = (0..400).map(|_| random_case(&mut rng)).collect();
    let mut input = format!("{}\n", cases.len());
    let mut expected = String::new();
    for ops in &cases {
        input += &format!("{}\n", ops.len());
        let mut p = MergePlacement::new();
        let mut keys = Vec::new();
        for op in ops {
            match op {
                Op::Init(k, s) => {
                    input += &format!("I {k} {s}\n");
                    p.init_key(*k, *s);
                    keys.push(*k);
                }
                Op::Place(devs) => {
                    input += &format!("P {}", devs.len());
                    for d in devs {
                        input += &format!(" {} {}", d.dev_type as i32, d.dev_id);
                    }
                    input += "\n";
                    p.ensure_placed(devs);
                }
            }
        }
        keys.sort();
        for k in keys {
            if let Some(c) = p.merge_context(k) {
                expected += &format!("{k} {} {}\n", c.dev_type as i32, c.dev_id);
            }
        }
        expected += "end\n";
    }
    let mut child = Command::new(build_oracle()).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let got = String::from_utf8(out.stdout).unwrap();
    for (i, (a, b)) in got.split("end\n").zip(expected.split("end\n")).enumerate() {
        assert_eq!(a, b, "case {i}: libstdc++ (left) and the Rust model (right) place differently");
    }
    assert_eq!(got, expected);
}

#[test]
fn the_sort_leaves_ties_where_libstdcxx_does() {
    // Sizes with many ties over lengths around the insertion-sort threshold and above,
    // compared through the oracle's sort (a case with one device: all keys there; order
    // shows in nothing) -- so compare the sort itself through placements over many devices.
    for n in [2usize, 15, 16, 17, 33, 100, 1000] {
        let mut v: Vec<(u64, usize)> = (0..n).map(|i| ((i as u64 * 2654435761) % 3, i)).collect();
        libstdcxx_sort(&mut v, &|a: &(u64, usize), b: &(u64, usize)| a.0 > b.0);
        assert!(v.windows(2).all(|w| w[0].0 >= w[1].0), "n={n}");
    }
    let mut m = StdUnorderedIntMap::new();
    for k in 0..20 {
        m.insert(k);
    }
    let mut order = m.iter_order();
    order.sort();
    assert_eq!(order, (0..20).collect::<Vec<_>>(), "a rehash keeps every key");
}

#[test]
fn without_a_cuda_driver_gpu_calls_fail_cleanly_and_print_nothing() {
    let exe = lib_dir().join("ctests").join("gpu_absent_kv");
    std::fs::create_dir_all(exe.parent().unwrap()).unwrap();
    let lib = lib_dir();
    let out = Command::new("cc")
        .args(["-std=c11", "-Wall", "-Wextra", "-Wpedantic", "-Werror", "-O1", "-g", "-I"])
        .arg(root().join("include"))
        .arg(root().join("ctests/gpu_absent.c"))
        .arg("-o")
        .arg(&exe)
        .arg("-L")
        .arg(&lib)
        .arg("-lkvstore")
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let run = Command::new(&exe).output().unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "gpu_absent failed:\n{stdout}\n{}", String::from_utf8_lossy(&run.stderr));
    assert!(run.stderr.is_empty(), "gpu_absent printed to stderr:\n{}", String::from_utf8_lossy(&run.stderr));
    std::io::stdout().write_all(&run.stdout).unwrap();
}

/// `ctests/gpu_diff.c`: GPU values against CPU values, byte for byte (NaN as NaN). Without a
/// GPU the program skips, and this test says so; scripts/test-gpu.sh runs it for real (and
/// under compute-sanitizer) on a GPU machine.
#[test]
fn gpu_differential_program_runs_or_skips_with_a_reason() {
    let lib = lib_dir();
    let exe = lib.join("ctests").join("gpu_diff_kv");
    std::fs::create_dir_all(exe.parent().unwrap()).unwrap();
    let out = Command::new("cc")
        .args(["-std=c11", "-Wall", "-Wextra", "-Wpedantic", "-Werror", "-O1", "-g", "-I"])
        .arg(root().join("include"))
        .arg(root().join("ctests/gpu_diff.c"))
        .arg("-o")
        .arg(&exe)
        .arg("-L")
        .arg(&lib)
        .arg("-lkvstore")
        .arg("-ldl")
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let gpu = Command::new(&exe).args(["gpu", "--small"]).output().unwrap();
    let gpu_out = String::from_utf8_lossy(&gpu.stdout).into_owned();
    assert!(gpu.status.success(), "gpu_diff gpu failed:\n{gpu_out}\n{}", String::from_utf8_lossy(&gpu.stderr));
    if gpu_out.starts_with("gpu_diff: skipped") {
        // Written past the test harness's capture, so the skip shows in every run's log.
        std::io::stderr().write_all(format!("gpu_differential_program: {gpu_out}").as_bytes()).unwrap();
        return;
    }
    let cpu = Command::new(&exe).args(["cpu", "--small"]).output().unwrap();
    assert!(cpu.status.success());
    assert_eq!(gpu_out, String::from_utf8_lossy(&cpu.stdout), "GPU values and CPU values disagree");
}
