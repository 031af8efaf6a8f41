//! The host (CPU) build of kernels/*.cu, compiled by build.rs from cpu/ (see
//! cpu/standin_kernels.h for the contract). The launch code calls [`find`] and [`run`].

use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};

/// `standin_dim3` of cpu/standin_kernels.h.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dim3 {
    pub x: c_uint,
    pub y: c_uint,
    pub z: c_uint,
}

/// Translates a device address to host memory: 0 and `*host` set, or a CUresult.
pub type TranslateFn = unsafe extern "C" fn(ctx: *mut c_void, device_addr: u64, host: *mut *mut c_void) -> c_int;

extern "C" {
    fn standin_kernel_count() -> c_int;
    fn standin_kernel_name(index: c_int) -> *const c_char;
    fn standin_kernel_find(name: *const c_char) -> c_int;
    fn standin_kernel_params(index: c_int, sizes: *mut *const c_uint) -> c_int;
    fn standin_kernel_run(
        index: c_int,
        params: *mut *mut c_void,
        grid: Dim3,
        block: Dim3,
        shared_bytes: c_uint,
        translate: TranslateFn,
        ctx: *mut c_void,
    ) -> c_int;
}

/// The names of every kernel of the host build.
pub fn names() -> Vec<String> {
    // SAFETY: the registry is a static table; a name pointer is a static NUL-terminated string.
    unsafe {
        (0..standin_kernel_count())
            .filter_map(|i| {
                let p = standin_kernel_name(i);
                (!p.is_null()).then(|| CStr::from_ptr(p).to_string_lossy().into_owned())
            })
            .collect()
    }
}

/// The index of the kernel called `name` in the host build.
pub fn find(name: &str) -> Option<c_int> {
    let name = CString::new(name).ok()?;
    // SAFETY: `name` is a valid NUL-terminated string for the call.
    let index = unsafe { standin_kernel_find(name.as_ptr()) };
    (index >= 0).then_some(index)
}

/// The sizes in bytes of kernel `index`'s parameters, in order, as the host build declares
/// them (a pointer 8, a struct its size): a module image must declare the same for the name.
pub fn param_sizes(index: c_int) -> Option<Vec<u32>> {
    let mut sizes: *const c_uint = std::ptr::null();
    // SAFETY: the registry sets `sizes` to a static array of the returned length.
    unsafe {
        let count = usize::try_from(standin_kernel_params(index, &mut sizes)).ok()?;
        Some(if count == 0 { Vec::new() } else { std::slice::from_raw_parts(sizes, count).to_vec() })
    }
}

/// Runs one launch of kernel `index` on the calling thread; 0 or a CUresult.
///
/// # Safety
/// `params` must hold one valid pointer per parameter of the kernel, each pointing to a value
/// of the parameter's type, as `cuLaunchKernel`'s `kernelParams`; `translate` must accept `ctx`.
pub unsafe fn run(index: c_int, params: *mut *mut c_void, grid: Dim3, block: Dim3, shared_bytes: c_uint, translate: TranslateFn, ctx: *mut c_void) -> c_int {
    // SAFETY: forwarded from the caller's contract.
    unsafe { standin_kernel_run(index, params, grid, block, shared_bytes, translate, ctx) }
}

/// The identity translation: for [`cuStandinRunKernel`], whose "device" pointers are host
/// pointers.
unsafe extern "C" fn identity_translate(_ctx: *mut c_void, device_addr: u64, host: *mut *mut c_void) -> c_int {
    // SAFETY: `host` is the launcher's out-parameter, valid for a write.
    unsafe { *host = device_addr as *mut c_void };
    0
}

/// **Test-only entry point, not part of CUDA**: runs kernel `name` of the host build on the
/// calling thread with host pointers as its device pointers (no translation, no checks), so
/// that tests can compare the kernels with the CPU loops without a driver. Returns 0, 500
/// (CUDA_ERROR_NOT_FOUND) for an unknown name, 1 (CUDA_ERROR_INVALID_VALUE) for an empty
/// grid or block, or the launcher's CUresult.
///
/// # Safety
/// `name` is a NUL-terminated string; `params` is as `cuLaunchKernel`'s `kernelParams` for
/// that kernel, its pointers host memory large enough for the launch.
#[no_mangle]
pub unsafe extern "C" fn cuStandinRunKernel(name: *const c_char, params: *mut *mut c_void, grid: Dim3, block: Dim3) -> c_int {
    if name.is_null() {
        return 1;
    }
    // SAFETY: `name` is NUL-terminated (the caller's contract).
    let Ok(name) = unsafe { CStr::from_ptr(name) }.to_str() else { return 500 };
    let Some(index) = find(name) else { return 500 };
    // SAFETY: forwarded from the caller's contract; the identity translation needs no context.
    unsafe { run(index, params, grid, block, 0, identity_translate, std::ptr::null_mut()) }
}

/// **Test-only entry point, not part of CUDA**: the name of kernel `index` of the host build
/// (sorted by name), or null past the last, so that tests can compare the registry with the
/// kernels NVRTC compiles.
#[no_mangle]
pub extern "C" fn cuStandinKernelName(index: c_int) -> *const c_char {
    // SAFETY: the registry is a static table; out-of-range indices answer null.
    unsafe { standin_kernel_name(index) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every name a kernel family of kernels/ generates, built from the dtype lists of
    /// prelude.cuh independently of the build's preprocessor scan.
    fn expected_names() -> Vec<String> {
        let summable = ["float32", "float64", "float16", "bfloat16", "uint8", "int8", "int32", "int64"];
        let all: Vec<&str> = summable.iter().copied().chain(["bool"]).collect();
        let mut names: Vec<String> = ["copy_bytes", "quantize_2bit", "dequantize_2bit", "quantize_1bit", "dequantize_1bit", "rsp_gather", "rsp_scatter", "fused_sum", "fused_copy", "fused_sum_by_value", "fused_copy_by_value"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        for d in summable {
            names.push(format!("sum_{d}"));
            names.push(format!("sum_out_{d}"));
            names.push(format!("rsp_accumulate_{d}"));
        }
        for s in &all {
            names.push(format!("fill_{s}"));
            for d in &all {
                names.push(format!("cast_{s}_to_{d}"));
            }
        }
        names.sort();
        names
    }

    #[test]
    fn the_registry_holds_every_kernel_of_kernels_sorted_and_findable() {
        let names = names();
        assert_eq!(names, expected_names(), "a kernel family of kernels/ is missing from the host build, or new (add it here)");
        for (i, name) in names.iter().enumerate() {
            assert_eq!(find(name), Some(i as c_int), "{name}");
        }
        assert_eq!(param_sizes(find("sum_float16").unwrap()), Some(vec![8, 128, 4, 8, 4, 4]), "dst, Sources, n_src, n, order, acc_in_dst");
        assert_eq!(param_sizes(find("fill_bool").unwrap()), Some(vec![8, 1, 8]));
        assert_eq!(param_sizes(-1), None);
        assert_eq!(find("sum_float33"), None);
        assert_eq!(find(""), None);
        assert!(cuStandinKernelName(names.len() as c_int).is_null());
        assert!(cuStandinKernelName(-1).is_null());
    }

    #[test]
    fn every_literal_kernel_declaration_in_kernels_is_registered() {
        // The kernels written out (not generated by a macro): a second, textual scan.
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../kernels");
        let names = names();
        let mut seen = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_none_or(|e| e != "cu") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            for decl in text.split("extern \"C\" __global__ void ").skip(1) {
                let name: String = decl.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
                if decl[name.len()..].starts_with("##") {
                    continue; // a family generated by a macro: expected_names() lists those
                }
                assert!(names.contains(&name), "{} declares {name}, not in the host build", path.display());
                seen += 1;
            }
        }
        assert!(seen >= 8, "only {seen} literal kernels found: the scan is broken");
    }

    /// Compiles `kernel` behind the shim as build.rs compiles kernels/; the compiler's result.
    fn compile_with_shim(kernel: &str) -> std::process::Output {
        let cpu = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("cpu");
        let mut child = std::process::Command::new("c++")
            .args(["-std=c++17", "-fsyntax-only", "-x", "c++", "-I"])
            .arg(cpu)
            .arg("-")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("run c++");
        let source = format!("#include \"cuda_shim.h\"\n{kernel}\n");
        std::io::Write::write_all(child.stdin.as_mut().unwrap(), source.as_bytes()).unwrap();
        child.wait_with_output().unwrap()
    }

    #[test]
    fn block_cooperation_is_refused_at_build_time() {
        let plain = "__global__ void k(float* x) { x[threadIdx.x] = 1.0f; }";
        assert!(compile_with_shim(plain).status.success(), "the control must compile");
        for body in [
            "__global__ void k(float* x) { __shared__ float s[32]; s[threadIdx.x] = x[0]; }",
            "__global__ void k(float* x) { extern __shared__ float s[]; x[0] = s[0]; }",
            "__global__ void k(float* x) { x[0] = 1.0f; __syncthreads(); }",
            "__global__ void k(float* x) { atomicAdd(x, 1.0f); }",
        ] {
            let out = compile_with_shim(body);
            assert!(!out.status.success(), "the host build must refuse: {body}");
            let stderr = String::from_utf8_lossy(&out.stderr);
            if body.contains("__s") {
                assert!(stderr.contains("not supported by the stand-in's host build"), "{body}: {stderr}");
            }
        }
    }

    fn launch(name: &str, params: &mut [*mut c_void], grid: u32, block: u32) -> c_int {
        let name = CString::new(name).unwrap();
        let (grid, block) = (Dim3 { x: grid, y: 1, z: 1 }, Dim3 { x: block, y: 1, z: 1 });
        // SAFETY: the callers pass this kernel's parameters, over buffers that cover the launch.
        unsafe { cuStandinRunKernel(name.as_ptr(), params.as_mut_ptr(), grid, block) }
    }

    #[test]
    fn a_launch_runs_every_thread_of_every_block_once_and_checks_its_shape() {
        // fill_int32 over 1000 elements with 3 blocks of 7 threads: the grid-stride loop
        // reaches every element only if all 21 threads run with their own indices.
        let mut out = vec![0i32; 1000];
        let (mut dst, mut value, mut n) = (out.as_mut_ptr() as u64, 42i32, out.len() as u64);
        let mut params = [&mut dst as *mut u64 as *mut c_void, &mut value as *mut i32 as *mut c_void, &mut n as *mut u64 as *mut c_void];
        assert_eq!(launch("fill_int32", &mut params, 3, 7), 0);
        assert!(out.iter().all(|v| *v == 42));
        assert_eq!(launch("fill_int32", &mut params, 0, 7), 1, "an empty grid is invalid");
        assert_eq!(launch("fill_int32", &mut params, 1, 0), 1, "an empty block is invalid");
        assert_eq!(launch("fill_int33", &mut params, 1, 1), 500);
    }

    /// Refuses one address: a translation failure inside a kernel must come back as the
    /// launch's result, not crash or be ignored.
    unsafe extern "C" fn refuse_one(ctx: *mut c_void, device_addr: u64, host: *mut *mut c_void) -> c_int {
        if device_addr == ctx as u64 {
            return 700;
        }
        // SAFETY: `host` is the launcher's out-parameter.
        unsafe { *host = device_addr as *mut c_void };
        0
    }

    #[test]
    fn a_refused_address_fails_the_launch_with_the_translators_result() {
        let a = [1.0f32; 8];
        let b = [2.0f32; 8];
        let mut out = [0.0f32; 8];
        let mut sources = [std::ptr::null::<c_void>(); 16];
        sources[0] = a.as_ptr().cast();
        sources[1] = b.as_ptr().cast();
        let (mut dst, mut n_src, mut n, mut order, mut acc) = (out.as_mut_ptr() as u64, 2u32, 8u64, 0u32, 0u32);
        let mut params = [
            &mut dst as *mut u64 as *mut c_void,
            sources.as_mut_ptr().cast(),
            &mut n_src as *mut u32 as *mut c_void,
            &mut n as *mut u64 as *mut c_void,
            &mut order as *mut u32 as *mut c_void,
            &mut acc as *mut u32 as *mut c_void,
        ];
        let index = find("sum_float32").unwrap();
        let shape = Dim3 { x: 1, y: 1, z: 1 };
        for refused in [b.as_ptr() as u64, out.as_ptr() as u64] {
            // SAFETY: sum_float32's parameters over 8-element buffers; `refuse_one` takes any ctx.
            let rc = unsafe { run(index, params.as_mut_ptr(), shape, shape, 0, refuse_one, refused as *mut c_void) };
            assert_eq!(rc, 700, "a refused source (read through dev_ptr) or parameter fails the launch");
        }
        // SAFETY: as above, refusing nothing.
        assert_eq!(unsafe { run(index, params.as_mut_ptr(), shape, shape, 0, refuse_one, std::ptr::null_mut()) }, 0);
        assert_eq!(out, [3.0f32; 8]);
    }
}
