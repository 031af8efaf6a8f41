//! Just enough NVRTC to compile kernels/*.cu as libkvstore does (prelude, IEEE options), for
//! the full-path tests: NVRTC output → cuModuleLoadData → cuLaunchKernel.

use std::ffi::{c_char, c_int, c_void, CString};
use std::path::PathBuf;

type Program = *mut c_void;

pub struct Nvrtc {
    lib: libloading::Library,
}

/// Where libnvrtc.so.12 is: KVSTORE_NVRTC_PATH, else scripts/nvrtc-wheel.sh's install
/// location. None (with the reason printed) when absent, unless KVSTORE_REQUIRE_NVRTC is set.
pub fn load() -> Option<Nvrtc> {
    let dir = std::env::var("KVSTORE_NVRTC_DIR").unwrap_or_else(|_| format!("{}/.cache/libkvstore/nvrtc-cu12-12.9.86", std::env::var("HOME").unwrap_or_default()));
    let path = std::env::var("KVSTORE_NVRTC_PATH").map(PathBuf::from).unwrap_or_else(|_| PathBuf::from(dir).join("nvidia/cuda_nvrtc/lib/libnvrtc.so.12"));
    // SAFETY: loading NVRTC runs no initialiser with preconditions.
    match unsafe { libloading::Library::new(&path) } {
        Ok(lib) => Some(Nvrtc { lib }),
        Err(e) => {
            let reason = format!("NVRTC not loadable from {} ({e}); run scripts/nvrtc-wheel.sh", path.display());
            assert!(std::env::var_os("KVSTORE_REQUIRE_NVRTC").is_none(), "KVSTORE_REQUIRE_NVRTC is set but {reason}");
            println!("skipped: {reason}");
            None
        }
    }
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// The kernel files, as src/gpu/kernels.rs lists them.
pub const FILES: [&str; 5] = ["sum.cu", "copy.cu", "compress.cu", "row_sparse.cu", "fused.cu"];

impl Nvrtc {
    fn sym<T: Copy>(&self, name: &str) -> T {
        // SAFETY: each name below is used with its nvrtc.h type.
        unsafe { *self.lib.get::<T>(format!("{name}\0").as_bytes()).unwrap() }
    }

    /// kernels/`file` with the prelude, compiled for `arch` ("sm_90": CUBIN, "compute_90": PTX).
    pub fn compile(&self, file: &str, arch: &str) -> Vec<u8> {
        let prelude = std::fs::read_to_string(repo().join("kernels/prelude.cuh")).unwrap();
        let body = std::fs::read_to_string(repo().join("kernels").join(file)).unwrap();
        let source = CString::new(format!("{prelude}\n#line 1 \"{file}\"\n{body}")).unwrap();
        let name = CString::new(file).unwrap();
        let options: Vec<CString> = ["--fmad=false", "--ftz=false", "--prec-div=true", "--prec-sqrt=true", &format!("--gpu-architecture={arch}")].iter().map(|o| CString::new(*o).unwrap()).collect();
        let option_ptrs: Vec<*const c_char> = options.iter().map(|o| o.as_ptr()).collect();
        let create: unsafe extern "C" fn(*mut Program, *const c_char, *const c_char, c_int, *const *const c_char, *const *const c_char) -> c_int = self.sym("nvrtcCreateProgram");
        let compile: unsafe extern "C" fn(Program, c_int, *const *const c_char) -> c_int = self.sym("nvrtcCompileProgram");
        let (size_fn, get_fn) = if arch.starts_with("sm_") { ("nvrtcGetCUBINSize", "nvrtcGetCUBIN") } else { ("nvrtcGetPTXSize", "nvrtcGetPTX") };
        let size: unsafe extern "C" fn(Program, *mut usize) -> c_int = self.sym(size_fn);
        let get: unsafe extern "C" fn(Program, *mut c_char) -> c_int = self.sym(get_fn);
        let destroy: unsafe extern "C" fn(*mut Program) -> c_int = self.sym("nvrtcDestroyProgram");
        let mut program: Program = std::ptr::null_mut();
        // SAFETY: NVRTC's documented calling sequence with valid strings and out-pointers.
        unsafe {
            assert_eq!(create(&mut program, source.as_ptr(), name.as_ptr(), 0, std::ptr::null(), std::ptr::null()), 0);
            assert_eq!(compile(program, option_ptrs.len() as c_int, option_ptrs.as_ptr()), 0, "NVRTC failed on {file}");
            let mut n = 0usize;
            assert_eq!(size(program, &mut n), 0);
            let mut image = vec![0u8; n];
            assert_eq!(get(program, image.as_mut_ptr().cast()), 0);
            destroy(&mut program);
            image
        }
    }
}
