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

/// Runs one launch of kernel `index` on the calling thread; 0 or a CUresult.
///
/// # Safety
/// `params` must hold one valid pointer per parameter of the kernel, each pointing to a value
/// of the parameter's type, as `cuLaunchKernel`'s `kernelParams`; `translate` must accept `ctx`.
pub unsafe fn run(index: c_int, params: *mut *mut c_void, grid: Dim3, block: Dim3, shared_bytes: c_uint, translate: TranslateFn, ctx: *mut c_void) -> c_int {
    // SAFETY: forwarded from the caller's contract.
    unsafe { standin_kernel_run(index, params, grid, block, shared_bytes, translate, ctx) }
}
