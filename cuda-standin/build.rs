//! Builds the host (CPU) build of kernels/*.cu into the stand-in, and gives the library the
//! real driver's SONAME.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libcuda.so.1");
    cc::Build::new().cpp(true).file("cpu/registry.cpp").include("cpu").compile("standin_kernels");
    println!("cargo:rerun-if-changed=cpu");
    println!("cargo:rerun-if-changed=../kernels");
}
