//! Builds the C programs of `ctests/` against `include/kvstore.h` and runs them: every
//! program against libkvstore.so (exit 0 = pass), and each `diff_*` program also against the
//! reference libmxnet.so (`MXNET_LIBRARY`), whose stdout must be identical.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod common;
use common::{lib_dir, root};

fn reference_library() -> Option<PathBuf> {
    match std::env::var_os("MXNET_LIBRARY").map(PathBuf::from).filter(|p| p.exists()) {
        Some(p) => Some(p),
        None => {
            assert!(
                std::env::var("KVSTORE_REQUIRE_REFERENCE").is_err(),
                "MXNET_LIBRARY must point at the reference libmxnet.so (see scripts/reference-mxnet.sh)"
            );
            eprintln!("skipped: reference libmxnet.so not found (set MXNET_LIBRARY)");
            None
        }
    }
}

/// Compiles `ctests/<name>.c` linked to `library` (a directory with libkvstore.so, or the
/// path of libmxnet.so); returns the executable.
fn build(name: &str, library: &Path, suffix: &str) -> PathBuf {
    build_source(&root().join("ctests").join(format!("{name}.c")), library, suffix)
}

/// Compiles the C program `source` as [`build`] does, once per test run: tests run in
/// parallel, and one must not write a program another is running.
fn build_source(source: &Path, library: &Path, suffix: &str) -> PathBuf {
    static BUILT: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());
    let name = source.file_stem().unwrap().to_string_lossy();
    let out_dir = lib_dir().join("ctests");
    std::fs::create_dir_all(&out_dir).unwrap();
    let exe = out_dir.join(format!("{name}_{suffix}"));
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if built.contains(&exe) {
        return exe;
    }
    let mut cc = Command::new("cc");
    cc.args(["-std=c11", "-Wall", "-Wextra", "-Wpedantic", "-Werror", "-O1", "-g", "-pthread", "-I"])
        .arg(root().join("include"))
        .arg(source)
        .arg("-o")
        .arg(&exe);
    if library.is_dir() {
        cc.arg("-L").arg(library).arg("-lkvstore");
        cc.arg(format!("-Wl,-rpath,{}", library.display()));
    } else {
        cc.arg(library);
        cc.arg(format!("-Wl,-rpath,{}", library.parent().unwrap().display()));
    }
    let out = cc.output().expect("run cc");
    assert!(out.status.success(), "compiling {name}.c failed:\n{}", String::from_utf8_lossy(&out.stderr));
    built.push(exe.clone());
    exe
}

fn run(exe: &Path) -> Output {
    run_with(exe, &[])
}

fn run_with(exe: &Path, args: &[&str]) -> Output {
    Command::new(exe).args(args).env_remove("DMLC_ROLE").output().expect("run the C program")
}

fn assert_passed(name: &str, which: &str, out: &Output) {
    assert!(
        out.status.success(),
        "{name} failed against {which} ({}):\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs a program against libkvstore.so only.
fn own(name: &str) -> Output {
    let out = run(&build(name, &lib_dir(), "kv"));
    assert_passed(name, "libkvstore.so", &out);
    out
}

/// Runs a program against both libraries and compares their stdout line by line; returns
/// libkvstore.so's run.
fn differential(name: &str) -> Output {
    differential_with(name, &[])
}

/// [`differential`] with arguments for the program.
fn differential_with(name: &str, args: &[&str]) -> Output {
    let ours = run_with(&build(name, &lib_dir(), "kv"), args);
    assert_passed(name, "libkvstore.so", &ours);
    let Some(reference) = reference_library() else { return ours };
    let theirs = run_with(&build(name, &reference, "mx"), args);
    assert_passed(name, "the reference libmxnet.so", &theirs);
    let (a, b) = (String::from_utf8_lossy(&theirs.stdout), String::from_utf8_lossy(&ours.stdout));
    let diffs: Vec<String> = a
        .lines()
        .zip(b.lines())
        .enumerate()
        .filter(|(_, (x, y))| x != y)
        .map(|(i, (x, y))| format!("line {}:\n  libmxnet.so:   {x}\n  libkvstore.so: {y}", i + 1))
        .collect();
    assert!(
        diffs.is_empty() && a.lines().count() == b.lines().count(),
        "{name}: output differs from the reference ({} vs {} lines):\n{}",
        a.lines().count(),
        b.lines().count(),
        diffs.join("\n")
    );
    eprintln!("{name}: {} lines identical to libmxnet.so", a.lines().count());
    ours
}

#[test]
fn walkthrough() {
    let out = differential("walkthrough");
    assert!(String::from_utf8_lossy(&out.stdout).contains("walkthrough passed"));
}

/// The C example of README.md, extracted from the page (its first ```c block), compiled and
/// run: the page cannot show a program that does not build or does not do what it says.
#[test]
fn readme_example() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let start = readme.find("```c\n").expect("README.md has a ```c block") + "```c\n".len();
    let len = readme[start..].find("```").expect("the ```c block ends");
    let source = lib_dir().join("ctests").join("readme_example.c");
    std::fs::create_dir_all(source.parent().unwrap()).unwrap();
    std::fs::write(&source, &readme[start..start + len]).unwrap();
    let out = run(&build_source(&source, &lib_dir(), "kv"));
    assert_passed("README.md's example", "libkvstore.so", &out);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("refused: MXNetError: MXKVStorePush: shape mismatch for key 7"), "README.md's example printed:\n{stdout}");
    assert!(stdout.contains("pulled 2 2 2\n"), "README.md's example printed:\n{stdout}");
}

#[test]
fn diff_store() {
    differential("diff_store");
}

#[test]
fn diff_dtypes() {
    differential("diff_dtypes");
}

#[test]
fn diff_ndarray() {
    differential("diff_ndarray");
}

#[test]
fn bad_input() {
    let out = own("bad_input");
    assert!(String::from_utf8_lossy(&out.stdout).contains("all checks passed"));
}

#[test]
fn dist_no_plugin() {
    let out = own("dist_no_plugin");
    assert!(String::from_utf8_lossy(&out.stdout).contains("dist_no_plugin passed"));
}

#[test]
fn row_ids() {
    let out = own("row_ids");
    assert!(String::from_utf8_lossy(&out.stdout).contains("row_ids passed"));
    assert!(out.stderr.is_empty(), "row_ids printed on stderr:\n{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn teardown() {
    let out = own("teardown");
    assert!(String::from_utf8_lossy(&out.stdout).contains("teardown passed"));
    assert!(out.stderr.is_empty(), "teardown printed on stderr:\n{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn async_error() {
    let out = own("async_error");
    assert!(String::from_utf8_lossy(&out.stdout).contains("async errors passed"));
}

#[test]
fn profiler() {
    let out = own("profiler");
    assert!(String::from_utf8_lossy(&out.stdout).contains("profiler: all checks passed"));
}

#[test]
fn aliasing() {
    let out = own("aliasing");
    assert!(String::from_utf8_lossy(&out.stdout).contains("aliasing passed"));
}

#[test]
fn cross_store() {
    let out = own("cross_store");
    assert!(String::from_utf8_lossy(&out.stdout).contains("cross_store passed"));
}

#[test]
fn half_applied() {
    let out = own("half_applied");
    assert!(String::from_utf8_lossy(&out.stdout).contains("half_applied passed"));
}

#[test]
fn fork() {
    let out = own("fork");
    assert!(String::from_utf8_lossy(&out.stdout).contains("fork passed"));
}

#[test]
fn oom() {
    let out = own("oom");
    assert!(String::from_utf8_lossy(&out.stdout).contains("oom passed"));
    assert!(out.stderr.is_empty(), "oom printed on stderr:\n{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn free_in_flight() {
    let out = own("free_in_flight");
    assert!(String::from_utf8_lossy(&out.stdout).contains("free_in_flight passed"));
}

#[test]
fn threads() {
    let out = own("threads");
    assert!(String::from_utf8_lossy(&out.stdout).contains("threads passed"));
}

#[test]
fn diff_compression() {
    differential("diff_compression");
}

#[test]
fn diff_sparse() {
    differential("diff_sparse");
}

#[test]
fn diff_ops() {
    differential("diff_ops");
}

#[test]
fn diff_slice_assign() {
    differential("diff_slice_assign");
}

/// Seeded random sequences of store calls (ctests/diff_random.c): 40 of 60 calls each.
#[test]
fn diff_random() {
    let out = differential("diff_random");
    assert!(String::from_utf8_lossy(&out.stdout).contains("diff_random: 40 seeds of 60 steps"));
}

/// The same sequences with calls the store must refuse before a third of their steps (wrong
/// shapes and dtypes, keys never initialised, keys of the other type, a second init, freed
/// and NULL arrays, a store handle for an array, a push-pull into a wrong output, bad
/// row_sparse pulls): each answers -1 (the program checks, and that pull outputs keep their
/// values), and the rest of the transcript is the one without them, so none changed the
/// store. MXNet answers 0 to some of them (a push of another shape) and crashes on others.
#[test]
fn random_calls_that_must_fail_change_nothing() {
    let exe = build("diff_random", &lib_dir(), "kv");
    let plain = Command::new(&exe).args(["40", "60", "1"]).output().expect("run diff_random");
    assert_passed("diff_random", "libkvstore.so", &plain);
    let with_bad = Command::new(&exe).args(["40", "60", "1", "bad"]).output().expect("run diff_random bad");
    assert_passed("diff_random bad", "libkvstore.so", &with_bad);
    let text = String::from_utf8_lossy(&with_bad.stdout);
    let bad: Vec<&str> = text.lines().filter(|l| l.starts_with("bad ")).collect();
    assert!(bad.len() > 500 && bad.iter().all(|l| l.ends_with(": -1")), "{} refused calls:\n{}", bad.len(), bad.join("\n"));
    for why in ["another shape", "never initialised", "the other type", "a second init", "already freed", "a NULL array", "push-pull into", "another dtype", "a store handle"] {
        assert!(bad.iter().any(|l| l.contains(why)), "no call with {why}");
    }
    let rest: Vec<&str> = text.lines().filter(|l| !l.starts_with("bad ")).collect();
    let plain_text = String::from_utf8_lossy(&plain.stdout);
    let want: Vec<&str> = plain_text.lines().collect();
    if let Some(i) = rest.iter().zip(&want).position(|(a, b)| a != b) {
        panic!("after refused calls the sequence printed otherwise at its line {}:\n with: {}\n without: {}", i + 1, rest[i], want[i]);
    }
    assert_eq!(rest.len(), want.len());
}

/// Random sequences with every key's values and outputs one per context (the layout
/// `gpu_standin` runs on the `nccl` store): 30 of 60 calls.
#[test]
fn diff_random_a_value_per_context() {
    let out = differential_with("diff_random", &["30", "60", "1", "per-device"]);
    assert!(String::from_utf8_lossy(&out.stdout).matches("(a value per context)").count() == 30);
}

#[test]
fn diff_broadcast_sparse() {
    differential("diff_broadcast_sparse");
}

#[test]
fn diff_parsing() {
    differential("diff_parsing");
}

/// Every C function MXNet 1.9.1's libmxnet.so exports (bindings/mxnet-exports.txt, checked
/// fresh against the wheel by scripts/gen-export-list.sh --check) is exported, and so every
/// symbol the unchanged frontends reference at link level (cpp-package's test, Perl's SWIG
/// wrappers, Scala's JNI library): eager binding (`RTLD_NOW`, `PERL_DL_NONLAZY`) succeeds.
#[test]
fn exports_every_function_libmxnet_exports() {
    let mut listed = std::fs::read_to_string(root().join("bindings/mxnet-exports.txt")).unwrap();
    listed += &std::fs::read_to_string(root().join("bindings/link-symbols.txt")).unwrap();
    let wanted: Vec<&str> = listed.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')).collect();
    assert!(wanted.len() > 294, "{} symbols listed", wanted.len());
    let nm = Command::new("nm").args(["-D", "--defined-only"]).arg(lib_dir().join("libkvstore.so")).output().expect("run nm");
    assert!(nm.status.success());
    let exported: std::collections::HashSet<String> =
        String::from_utf8_lossy(&nm.stdout).lines().filter_map(|l| l.split_whitespace().nth(2).map(String::from)).collect();
    let missing: Vec<&&str> = wanted.iter().filter(|s| !exported.contains(**s)).collect();
    assert!(missing.is_empty(), "not exported: {missing:?}");
}

/// libkvstore.so brings libstdc++ as libmxnet.so does (see build.rs): Perl's SWIG wrappers
/// are C++ linked by the C driver and need it under eager binding.
#[test]
fn library_needs_libstdcxx_like_libmxnet() {
    let out = Command::new("readelf").arg("-d").arg(lib_dir().join("libkvstore.so")).output().expect("run readelf");
    assert!(String::from_utf8_lossy(&out.stdout).contains("[libstdc++.so.6]"));
}
