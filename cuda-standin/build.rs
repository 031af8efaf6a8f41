//! Builds the host (CPU) build of kernels/*.cu into the stand-in, and gives the library the
//! real driver's SONAME.
//!
//! Each unit is compiled as C++ as NVRTC compiles it (the prelude prepended), behind the
//! CUDA-on-CPU shim (cpu/cuda_shim.h) and inside `namespace standin_kernels`, with
//! `extern "C"` dropped so that the kernels' names are C++ names of that namespace and can
//! clash with nothing. The kernels are found by preprocessing each unit with `__global__`
//! defined to a marker (macros generate most of them), and a launcher is generated per
//! kernel (cpu/launcher.h) plus a registry sorted by name (cpu/launcher.cpp serves it).
//!
//! `CUDA_STANDIN_ASAN=1` compiles the kernels with AddressSanitizer (kernels/README.md).
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

/// What `__global__` expands to while the kernels are listed.
const MARKER: &str = "STANDIN_KERNEL_MARKER";

/// A unit of kernels/: its path and its source.
struct Unit {
    path: PathBuf,
    stem: String,
    body: String,
}

fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libcuda.so.1");
    println!("cargo:rerun-if-changed=cpu");
    println!("cargo:rerun-if-changed=../kernels");
    println!("cargo:rerun-if-env-changed=CUDA_STANDIN_ASAN");
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    let kernels = manifest.join("../kernels").canonicalize().expect("kernels/ beside cuda-standin/");
    let prelude_path = kernels.join("prelude.cuh");
    let prelude = read(&prelude_path);
    let units = units(&kernels);

    let mut build = cc::Build::new();
    build.cpp(true).std("c++17").include(manifest.join("cpu")).opt_level(2);
    // IEEE arithmetic exactly as written, as the GPU build (--fmad=false --ftz=false):
    // no contraction, no fast math (which would also link crtfastmath's FTZ/DAZ), SSE2
    // arithmetic, integer overflow wrapping. Nothing of the host build is exported.
    for flag in ["-ffp-contract=off", "-fno-fast-math", "-fwrapv", "-fvisibility=hidden"] {
        build.flag(flag);
    }
    if std::env::var("CARGO_CFG_TARGET_ARCH").is_ok_and(|a| a == "x86_64") {
        build.flag("-msse2").flag("-mfpmath=sse");
    }
    build.flag("-Wall").flag("-Werror");
    if std::env::var("CUDA_STANDIN_ASAN").is_ok_and(|v| v == "1") {
        build.flag("-fsanitize=address").flag("-fno-omit-frame-pointer");
        println!("cargo:rustc-link-lib=dylib=asan");
    }

    let compiler = build.get_compiler();
    let mut kernels_by_unit = Vec::new();
    for unit in &units {
        let names = kernel_names(compiler.path(), &prelude, unit);
        let file = out.join(format!("host_{}.cpp", unit.stem));
        let source = host_unit(&file, &prelude_path, &prelude, unit, &names);
        write_if_changed(&file, &source);
        build.file(&file);
        kernels_by_unit.extend(names);
    }
    let registry = out.join("registry.cpp");
    write_if_changed(&registry, &registry_source(kernels_by_unit));
    build.file(&registry).file(manifest.join("cpu/launcher.cpp"));
    build.compile("standin_kernels");
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// Every kernels/*.cu, by name.
fn units(kernels: &Path) -> Vec<Unit> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(kernels)
        .expect("list kernels/")
        .map(|e| e.expect("list kernels/").path())
        .filter(|p| p.extension().is_some_and(|e| e == "cu"))
        .collect();
    paths.sort();
    paths
        .into_iter()
        .map(|path| Unit { stem: path.file_stem().unwrap().to_string_lossy().into_owned(), body: read(&path), path })
        .collect()
}

/// The names of the unit's kernels, from the preprocessed unit: each `__global__` must be
/// `extern "C" __global__ void NAME(`, the form NVRTC exports unmangled.
fn kernel_names(cxx: &Path, prelude: &str, unit: &Unit) -> Vec<String> {
    let input = format!("{prelude}\n{}\n", unit.body);
    let mut child = Command::new(cxx)
        .args(["-E", "-P", "-x", "c++", &format!("-D__global__={MARKER}"), "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("run the C++ preprocessor");
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), input.as_bytes()).unwrap();
    let output = child.wait_with_output().expect("run the C++ preprocessor");
    assert!(output.status.success(), "preprocessing {} failed", unit.path.display());
    let text = String::from_utf8(output.stdout).expect("preprocessed text is UTF-8");
    let mut names = Vec::new();
    let mut rest = text.as_str();
    while let Some(at) = rest.find(MARKER) {
        let before = rest[..at].trim_end();
        let after = rest[at + MARKER.len()..].trim_start();
        assert!(
            before.ends_with("extern \"C\""),
            "{}: every kernel must be declared `extern \"C\" __global__ void name(...)` (NVRTC then exports it unmangled)",
            unit.path.display()
        );
        let after = after.strip_prefix("void").unwrap_or_else(|| panic!("{}: a kernel returns void", unit.path.display()));
        let name: String = after.trim_start().chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
        assert!(!name.is_empty(), "{}: a kernel without a name", unit.path.display());
        names.push(name);
        rest = &rest[at + MARKER.len()..];
    }
    names
}

/// The C++ unit for one kernels/*.cu: the shim, then prelude and unit in the kernels'
/// namespace with `extern "C"` dropped, then one launcher per kernel.
fn host_unit(file: &Path, prelude_path: &Path, prelude: &str, unit: &Unit, names: &[String]) -> String {
    let mut s = String::from("// Generated by cuda-standin/build.rs from kernels/; do not edit.\n#include \"cuda_shim.h\"\n");
    s += "namespace standin_kernels {\n";
    let _ = writeln!(s, "#line 1 \"{}\"\n{prelude}", prelude_path.display());
    let _ = writeln!(s, "#line 1 \"{}\"\n{}", unit.path.display(), unit.body.replace("extern \"C\"", ""));
    // Diagnostics past the unit name the generated file's own lines again.
    let _ = writeln!(s, "#line {} \"{}\"", s.lines().count() + 2, file.display());
    s += "}  // namespace standin_kernels\n#include \"launcher.h\"\nnamespace standin_launchers {\n";
    for name in names {
        let _ = writeln!(s, "int {name}(const standin::Launch& l) {{ return standin::launch(&standin_kernels::{name}, l); }}");
        let _ = writeln!(s, "const unsigned* {name}_params(int* n) {{ return standin::param_sizes(&standin_kernels::{name}, n); }}");
    }
    s + "}  // namespace standin_launchers\n"
}

/// The registry: every kernel's launcher, sorted by name for standin_kernel_find.
fn registry_source(mut names: Vec<String>) -> String {
    names.sort();
    let dup = names.windows(2).find(|w| w[0] == w[1]);
    assert!(dup.is_none(), "kernel {} is defined twice in kernels/", dup.unwrap()[0]);
    let mut s = String::from("// Generated by cuda-standin/build.rs from kernels/; do not edit.\n#include \"launcher.h\"\nnamespace standin_launchers {\n");
    for name in &names {
        let _ = writeln!(s, "int {name}(const standin::Launch&);\nconst unsigned* {name}_params(int*);");
    }
    s += "}  // namespace standin_launchers\nnamespace standin {\nconst Entry kEntries[] = {\n";
    for name in &names {
        let _ = writeln!(s, "    {{\"{name}\", &standin_launchers::{name}, &standin_launchers::{name}_params}},");
    }
    let _ = writeln!(s, "}};\nconst int kEntryCount = {};\n}}  // namespace standin", names.len());
    s
}

/// Leaves an unchanged file alone, so that cc's objects stay fresh.
fn write_if_changed(path: &Path, text: &str) {
    if std::fs::read_to_string(path).is_ok_and(|old| old == text) {
        return;
    }
    std::fs::write(path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}
