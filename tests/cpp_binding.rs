//! The C++17 RAII wrapper of `bindings/cpp`: its test program is compiled with warnings as
//! errors and run against libkvstore.so, plainly and under AddressSanitizer + UBSan (memory
//! errors in the wrapper itself, e.g. the updater's heap state). Handle ownership (freed
//! once, never twice, never leaked) is not visible to ASan, since libkvstore's handles are
//! registry ids; test_raii.cpp checks it through the registry instead.

use std::process::Command;

mod common;
use common::{lib_dir, root};

fn build_and_run(suffix: &str, extra: &[&str]) -> String {
    let lib = lib_dir();
    let exe = lib.join(format!("test_raii_{suffix}"));
    let out = Command::new("g++")
        .args(["-std=c++17", "-Wall", "-Wextra", "-Werror", "-g"])
        .args(extra)
        .arg("-I")
        .arg(root().join("include"))
        .arg("-I")
        .arg(root().join("bindings/cpp/include"))
        .arg(root().join("bindings/cpp/tests/test_raii.cpp"))
        .arg("-o")
        .arg(&exe)
        .arg("-L")
        .arg(&lib)
        .arg("-lkvstore")
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .output()
        .expect("run g++");
    // No skip when the sanitizer runtimes are missing: the compile/link failure fails the test.
    assert!(
        out.status.success(),
        "compiling test_raii.cpp ({suffix}, {extra:?}) failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(&exe)
        .env("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=0")
        .env("UBSAN_OPTIONS", "halt_on_error=1:print_stacktrace=1")
        .output()
        .expect("run test_raii");
    let stdout = String::from_utf8_lossy(&run.stdout).into_owned();
    assert!(
        run.status.success(),
        "test_raii ({suffix}) failed ({}):\n{stdout}\n{}",
        run.status,
        String::from_utf8_lossy(&run.stderr)
    );
    println!("test_raii ({suffix}):\n{stdout}");
    stdout
}

#[test]
fn raii_wrapper() {
    assert!(build_and_run("plain", &["-O2"]).contains("raii wrapper: all checks passed"));
}

#[test]
fn raii_wrapper_under_sanitizers() {
    let out = build_and_run("asan", &["-O1", "-fsanitize=address,undefined", "-fno-omit-frame-pointer"]);
    assert!(out.contains("raii wrapper: all checks passed"));
}
