//! NVRTC, loaded at run time from an explicit list of paths before the usual names.
//!
//! cudarc's own NVRTC loader looks for `libnvrtc.so`, `.so.12`, ... but never `.so.13`
//! (CUDA 13 machines ship only that), and it panics when nothing is found. So libkvstore
//! opens the library itself and resolves the few entry points it needs into a table typed
//! with plain `c_int` results.

use once_cell::sync::Lazy;
use std::ffi::{CStr, CString};
use std::os::raw::{c_char, c_int};

/// Overrides the library's location: the full path of a `libnvrtc.so*`.
pub const PATH_ENV: &str = "KVSTORE_NVRTC_PATH";

/// Explicit locations tried before the dynamic loader's search by name.
const EXPLICIT_PATHS: [&str; 3] =
    ["/usr/local/cuda/lib64/libnvrtc.so.13", "/usr/local/cuda/lib64/libnvrtc.so.12", "/usr/local/cuda/lib64/libnvrtc.so"];

type Program = *mut std::ffi::c_void;

struct Api {
    version: unsafe extern "C" fn(*mut c_int, *mut c_int) -> c_int,
    num_supported_archs: unsafe extern "C" fn(*mut c_int) -> c_int,
    supported_archs: unsafe extern "C" fn(*mut c_int) -> c_int,
    create_program: unsafe extern "C" fn(
        *mut Program,
        *const c_char,
        *const c_char,
        c_int,
        *const *const c_char,
        *const *const c_char,
    ) -> c_int,
    destroy_program: unsafe extern "C" fn(*mut Program) -> c_int,
    compile_program: unsafe extern "C" fn(Program, c_int, *const *const c_char) -> c_int,
    get_program_log_size: unsafe extern "C" fn(Program, *mut usize) -> c_int,
    get_program_log: unsafe extern "C" fn(Program, *mut c_char) -> c_int,
    get_ptx_size: unsafe extern "C" fn(Program, *mut usize) -> c_int,
    get_ptx: unsafe extern "C" fn(Program, *mut c_char) -> c_int,
    get_cubin_size: unsafe extern "C" fn(Program, *mut usize) -> c_int,
    get_cubin: unsafe extern "C" fn(Program, *mut c_char) -> c_int,
}

/// A loaded NVRTC.
pub struct Nvrtc {
    api: Api,
    /// Where the library was found.
    pub path: String,
    /// (major, minor) of NVRTC.
    pub version: (i32, i32),
    /// The `sm_XY` numbers (XY) NVRTC can compile for.
    pub supported_archs: Vec<i32>,
    _lib: libloading::Library,
}

/// What to produce for an architecture `XY`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Target {
    /// Machine code for `sm_XY` (loaded without a JIT, so any driver new enough for the
    /// device runs it).
    Cubin(i32),
    /// PTX for `compute_XY`, JIT-compiled by the driver at load.
    Ptx(i32),
}

impl Target {
    fn arch_option(self) -> String {
        match self {
            Target::Cubin(a) => format!("--gpu-architecture=sm_{a}"),
            Target::Ptx(a) => format!("--gpu-architecture=compute_{a}"),
        }
    }
}

/// The options every kernel is compiled with: IEEE arithmetic, no contraction into fused
/// multiply-adds, no flush of subnormals, so GPU results are the CPU loops' bit for bit.
pub const IEEE_OPTIONS: [&str; 4] = ["--fmad=false", "--ftz=false", "--prec-div=true", "--prec-sqrt=true"];

/// A compiled program: the image and NVRTC's log (empty when it had nothing to say).
pub struct Compiled {
    /// PTX text (NUL-terminated) or a CUBIN image.
    pub image: Vec<u8>,
    /// NVRTC's log, trimmed.
    pub log: String,
}

static NVRTC: Lazy<Result<Nvrtc, String>> = Lazy::new(load);

/// NVRTC, or why it cannot be used.
pub fn nvrtc() -> Result<&'static Nvrtc, String> {
    NVRTC.as_ref().map_err(Clone::clone)
}

fn candidates() -> Vec<String> {
    let mut out = Vec::new();
    if let Ok(p) = std::env::var(PATH_ENV) {
        out.push(p);
    }
    out.extend(EXPLICIT_PATHS.iter().map(|s| s.to_string()));
    out.push("libnvrtc.so.13".to_string());
    out.extend(cudarc::get_lib_name_candidates("nvrtc"));
    out
}

fn resolve<T: Copy>(lib: &libloading::Library, name: &str) -> Result<T, String> {
    // SAFETY: `T` is `name`'s C prototype from nvrtc.h (results as plain c_int); the
    // library is kept alive beside the table in `Nvrtc`.
    unsafe { lib.get::<T>(name.as_bytes()).map(|s| *s) }.map_err(|e| format!("NVRTC has no {name}: {e}"))
}

fn check(what: &str, code: c_int) -> Result<(), String> {
    if code == 0 {
        Ok(())
    } else {
        Err(format!("{what} failed with NVRTC error {code}"))
    }
}

fn load() -> Result<Nvrtc, String> {
    let tried = candidates();
    let found = tried.iter().find_map(|p| {
        // SAFETY: loading NVRTC runs only its initialisers.
        unsafe { libloading::Library::new(p) }.ok().map(|lib| (p.clone(), lib))
    });
    let Some((path, lib)) = found else {
        return Err(format!("NVRTC (libnvrtc.so) could not be loaded; tried {} (set {PATH_ENV} to its path)", tried.join(", ")));
    };
    let api = Api {
        version: resolve(&lib, "nvrtcVersion")?,
        num_supported_archs: resolve(&lib, "nvrtcGetNumSupportedArchs")?,
        supported_archs: resolve(&lib, "nvrtcGetSupportedArchs")?,
        create_program: resolve(&lib, "nvrtcCreateProgram")?,
        destroy_program: resolve(&lib, "nvrtcDestroyProgram")?,
        compile_program: resolve(&lib, "nvrtcCompileProgram")?,
        get_program_log_size: resolve(&lib, "nvrtcGetProgramLogSize")?,
        get_program_log: resolve(&lib, "nvrtcGetProgramLog")?,
        get_ptx_size: resolve(&lib, "nvrtcGetPTXSize")?,
        get_ptx: resolve(&lib, "nvrtcGetPTX")?,
        get_cubin_size: resolve(&lib, "nvrtcGetCUBINSize")?,
        get_cubin: resolve(&lib, "nvrtcGetCUBIN")?,
    };
    let (mut major, mut minor) = (0, 0);
    // SAFETY: valid out-pointers.
    check("nvrtcVersion", unsafe { (api.version)(&mut major, &mut minor) })?;
    let mut n = 0;
    // SAFETY: valid out-pointer.
    check("nvrtcGetNumSupportedArchs", unsafe { (api.num_supported_archs)(&mut n) })?;
    let mut archs = vec![0; n.max(0) as usize];
    // SAFETY: the buffer holds the `n` entries NVRTC just reported.
    check("nvrtcGetSupportedArchs", unsafe { (api.supported_archs)(archs.as_mut_ptr()) })?;
    Ok(Nvrtc { api, path, version: (major, minor), supported_archs: archs, _lib: lib })
}

/// Destroys the program when the compile is done, whatever happened.
struct ProgramGuard<'a>(&'a Api, Program);

impl Drop for ProgramGuard<'_> {
    fn drop(&mut self) {
        // SAFETY: a program created by nvrtcCreateProgram and destroyed only here.
        unsafe { (self.0.destroy_program)(&mut self.1) };
    }
}

impl Nvrtc {
    /// The architecture to build for a device of compute capability `cc`: CUBIN for its
    /// own `sm_XY` when NVRTC knows it; otherwise PTX for the newest `compute_XY` NVRTC
    /// knows below it, which the driver JIT-compiles.
    pub fn target_for(&self, cc: (i32, i32)) -> Result<Target, String> {
        let arch = cc.0 * 10 + cc.1;
        if self.supported_archs.contains(&arch) {
            return Ok(Target::Cubin(arch));
        }
        match self.supported_archs.iter().copied().filter(|a| *a <= arch).max() {
            Some(a) => Ok(Target::Ptx(a)),
            None => Err(format!(
                "NVRTC {}.{} cannot compile for sm_{arch} (it supports {:?})",
                self.version.0, self.version.1, self.supported_archs
            )),
        }
    }

    /// Compiles `source` (named `name` in diagnostics) for `target` with the IEEE options
    /// and `extra` options. Err carries NVRTC's log.
    pub fn compile(&self, name: &str, source: &str, target: Target, extra: &[&str]) -> Result<Compiled, String> {
        let c_source = CString::new(source).map_err(|_| format!("{name}: the source contains a NUL byte"))?;
        let c_name = CString::new(name).map_err(|_| format!("{name}: the name contains a NUL byte"))?;
        let mut options: Vec<CString> = Vec::new();
        for o in IEEE_OPTIONS.iter().copied().chain(extra.iter().copied()) {
            options.push(CString::new(o).map_err(|_| format!("{name}: an option contains a NUL byte"))?);
        }
        options.push(CString::new(target.arch_option()).map_err(|_| "arch option".to_string())?);
        let option_ptrs: Vec<*const c_char> = options.iter().map(|o| o.as_ptr()).collect();
        let mut program: Program = std::ptr::null_mut();
        // SAFETY: NUL-terminated strings that outlive the call; no headers.
        check("nvrtcCreateProgram", unsafe {
            (self.api.create_program)(&mut program, c_source.as_ptr(), c_name.as_ptr(), 0, std::ptr::null(), std::ptr::null())
        })?;
        let guard = ProgramGuard(&self.api, program);
        // SAFETY: a live program; the option pointers outlive the call.
        let compiled = unsafe { (self.api.compile_program)(guard.1, option_ptrs.len() as c_int, option_ptrs.as_ptr()) };
        let log = self.log(guard.1)?;
        if compiled != 0 {
            return Err(format!("{name} failed to compile for {target:?} (NVRTC error {compiled}):\n{log}"));
        }
        let (size_fn, get_fn, what) = match target {
            Target::Cubin(_) => (self.api.get_cubin_size, self.api.get_cubin, "CUBIN"),
            Target::Ptx(_) => (self.api.get_ptx_size, self.api.get_ptx, "PTX"),
        };
        let mut size = 0usize;
        // SAFETY: a compiled program; valid out-pointer.
        check(&format!("getting the {what} size"), unsafe { size_fn(guard.1, &mut size) })?;
        let mut image = vec![0u8; size];
        // SAFETY: the buffer holds the `size` bytes NVRTC reported.
        check(&format!("getting the {what}"), unsafe { get_fn(guard.1, image.as_mut_ptr() as *mut c_char) })?;
        Ok(Compiled { image, log })
    }

    fn log(&self, program: Program) -> Result<String, String> {
        let mut size = 0usize;
        // SAFETY: a live program; valid out-pointer.
        check("nvrtcGetProgramLogSize", unsafe { (self.api.get_program_log_size)(program, &mut size) })?;
        let mut buf = vec![0u8; size.max(1)];
        // SAFETY: the buffer holds the `size` bytes NVRTC reported (at least 1).
        check("nvrtcGetProgramLog", unsafe { (self.api.get_program_log)(program, buf.as_mut_ptr() as *mut c_char) })?;
        let text = CStr::from_bytes_until_nul(&buf).map(|c| c.to_string_lossy().into_owned()).unwrap_or_default();
        Ok(text.trim().to_string())
    }
}
