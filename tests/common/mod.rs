//! What the integration tests share: the project root, and libkvstore.so built for the
//! test run's profile.

pub mod standin;

use std::path::{Path, PathBuf};
use std::process::Command;

/// Compiles `ctests/<name>.c` with `flags` into `exe`, linked to the libkvstore.so in
/// `library` (found there at run time too) and then `libs`.
#[allow(dead_code)] // not every test binary compiles C programs
pub fn compile_ctest(name: &str, exe: &Path, library: &Path, flags: &[&str], libs: &[&str]) {
    let out = Command::new("cc")
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", "-g", "-pthread", "-I"])
        .arg(root().join("include"))
        .args(flags)
        .arg(root().join("ctests").join(format!("{name}.c")))
        .arg("-o")
        .arg(exe)
        .arg("-L")
        .arg(library)
        .arg("-lkvstore")
        .args(libs)
        .arg(format!("-Wl,-rpath,{}", library.display()))
        .output()
        .expect("run cc");
    assert!(out.status.success(), "compiling {name}.c failed:\n{}", String::from_utf8_lossy(&out.stderr));
}

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The directory holding libkvstore.so for this test run's profile (target/<profile>). The
/// library is built first: `cargo test` builds the rlib for Rust tests but does not refresh
/// the cdylib the C programs link.
pub fn lib_dir() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let exe = std::env::current_exe().expect("test executable path");
            let dir = exe.parent().and_then(Path::parent).expect("target/<profile>").to_path_buf();
            let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
            let mut build = Command::new(cargo);
            build.args(["build", "--lib", "--quiet"]).current_dir(root());
            if dir.ends_with("release") {
                build.arg("--release");
            }
            let status = build.status().expect("run cargo build");
            assert!(status.success(), "cargo build of libkvstore.so failed");
            assert!(dir.join("libkvstore.so").exists(), "{} has no libkvstore.so", dir.display());
            dir
        })
        .clone()
}

/// A small deterministic generator (xorshift), so failures reproduce.
#[allow(dead_code)] // not every test binary draws random cases
pub struct Rng(pub u64);
#[allow(dead_code)]
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}
