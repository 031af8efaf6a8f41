//! Link-time shape of libkvstore.so.
//!
//! libmxnet.so lists libstdc++ among its needed libraries, and MXNet's Perl frontend relies
//! on that: its SWIG wrappers are C++ but linked by the C compiler driver, so `operator new[]`
//! and friends come from whatever the MXNet library brings in. With eager binding
//! (`PERL_DL_NONLAZY=1`, as `make test` sets) a library without libstdc++ fails to load
//! with "undefined symbol: _Znam". A drop-in has to bring it too; it costs one entry in
//! DT_NEEDED for a library every C++-capable system has.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,--no-as-needed");
    println!("cargo:rustc-cdylib-link-arg=-lstdc++");
    println!("cargo:rustc-cdylib-link-arg=-Wl,--as-needed");
    println!("cargo:rerun-if-changed=build.rs");
}
