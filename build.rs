//! Link-time shape of libkvstore.so.
//!
//! libmxnet.so lists libstdc++ among its needed libraries, and MXNet's Perl frontend relies
//! on that: its SWIG wrappers are C++ but linked by the C compiler driver, so `operator new[]`
//! and friends come from whatever the MXNet library brings in. With eager binding
//! (`PERL_DL_NONLAZY=1`, as `make test` sets) a library without libstdc++ fails to load
//! with "undefined symbol: _Znam". A drop-in has to bring it too; it costs one entry in
//! DT_NEEDED for a library every C++-capable system has.
//!
//! The library carries the SONAME `libkvstore.so.<major>` (from Cargo.toml's version), as a
//! system library does: programs record that name, and `scripts/install.sh` installs
//! `libkvstore.so.X.Y.Z` with the `.so.X` and `.so` links. A program linked against the build
//! tree records the same name, so a `libkvstore.so.<major>` link beside the built library
//! lets it run from there too (`-Wl,-rpath,target/release`) before any install.
use std::path::{Path, PathBuf};

fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,--no-as-needed");
    println!("cargo:rustc-cdylib-link-arg=-lstdc++");
    println!("cargo:rustc-cdylib-link-arg=-Wl,--as-needed");
    let soname = format!("libkvstore.so.{}", env!("CARGO_PKG_VERSION_MAJOR"));
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,{soname}");
    if let Some(dir) = profile_dir() {
        link_soname(&dir, &soname);
    }
    println!("cargo:rerun-if-changed=build.rs");
}

/// target/[<triple>/]<profile>: OUT_DIR is <profile dir>/build/kvstore-<hash>/out.
fn profile_dir() -> Option<PathBuf> {
    let out = PathBuf::from(std::env::var_os("OUT_DIR")?);
    out.ancestors().nth(3).map(Path::to_path_buf)
}

/// `<dir>/<soname>` -> `libkvstore.so` (dangling until the library is linked). A failure only
/// costs running build-tree programs without LD_LIBRARY_PATH, so it warns instead of failing.
fn link_soname(dir: &Path, soname: &str) {
    let link = dir.join(soname);
    if std::fs::read_link(&link).is_ok() {
        return;
    }
    if let Err(e) = std::os::unix::fs::symlink("libkvstore.so", &link) {
        println!("cargo:warning=could not create {}: {e}", link.display());
    }
}
