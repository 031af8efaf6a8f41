//! Running C programs on the CUDA stand-in (`cuda-standin/`, test equipment): the stand-in's
//! directory goes first on `LD_LIBRARY_PATH` of the programs run here only, so every other
//! test keeps seeing no driver.
#![allow(dead_code)] // not every test binary runs programs on the stand-in

use super::{lib_dir, root};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// The stand-in's directory (built if needed by scripts/cuda-standin.sh).
pub fn standin_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let out = Command::new(root().join("scripts/cuda-standin.sh")).output().expect("run scripts/cuda-standin.sh");
        assert!(out.status.success(), "building the stand-in failed:\n{}", String::from_utf8_lossy(&out.stderr));
        let dir = String::from_utf8_lossy(&out.stdout).lines().last().unwrap_or_default().trim().to_string();
        assert!(Path::new(&dir).join("libcuda.so.1").exists(), "no libcuda.so.1 in {dir:?}");
        PathBuf::from(dir)
    })
}

/// NVRTC for the kernels' images (the stand-in reads their names).
pub fn nvrtc() -> &'static str {
    static PATH: OnceLock<String> = OnceLock::new();
    PATH.get_or_init(|| {
        if let Ok(p) = std::env::var("KVSTORE_NVRTC_PATH") {
            return p;
        }
        let out = Command::new(root().join("scripts/nvrtc-wheel.sh")).output().expect("run scripts/nvrtc-wheel.sh");
        assert!(out.status.success(), "NVRTC is needed: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).lines().last().unwrap_or_default().trim().to_string()
    })
}

/// Compiles `ctests/<name>.c` with `flags` into `<name>_<suffix>`.
pub fn build(name: &str, suffix: &str, flags: &[&str]) -> PathBuf {
    let dir = lib_dir().join("ctests");
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join(format!("{name}_{suffix}"));
    let mut all = vec!["-Wpedantic"];
    all.extend_from_slice(flags);
    super::compile_ctest(name, &exe, &lib_dir(), &all, &[]);
    exe
}

/// Runs `exe args` on the stand-in with `devices` devices and the extra environment `env`.
pub fn run(exe: &Path, args: &[&str], devices: usize, env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(exe);
    // NVRTC's directory too: it opens its builtins library by name (under ASan the loader
    // does not find it beside libnvrtc otherwise).
    let nvrtc_dir = Path::new(nvrtc()).parent().map(Path::to_path_buf).unwrap_or_default();
    let path = std::env::join_paths([standin_dir().to_path_buf(), nvrtc_dir]).unwrap();
    cmd.args(args)
        .env("LD_LIBRARY_PATH", path)
        .env("CUDA_STANDIN_DEVICES", devices.to_string())
        .env("KVSTORE_NVRTC_PATH", nvrtc())
        .env_remove("CUDA_STANDIN_FAIL")
        .env_remove("CUDA_STANDIN_TRACE")
        .env_remove("CUDA_STANDIN_DELAY_US")
        .env_remove("DMLC_ROLE");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run a C program")
}

