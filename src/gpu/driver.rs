//! The CUDA driver, loaded at run time: a lazily built [`Runtime`] or the reason there is none.
//!
//! cudarc panics when its library or one of its symbols is missing, and a panic's message goes
//! to stderr through the panic hook even when it is caught. So nothing here calls a cudarc
//! function that can panic: presence is checked with `is_culib_present()` first, and every
//! driver entry point is resolved through `culib().get(..)` (a `Result`) into a table typed
//! with plain `c_int` results (a driver newer than cudarc's enum may return codes it does not
//! list). `catch_unwind` stays as the last line, never the plan.

use std::os::raw::{c_char, c_int, c_uint};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// The oldest driver API this build accepts (CUDA 12.0, the API cudarc is built against).
pub const MIN_DRIVER_VERSION: c_int = 12000;

const CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: c_int = 75;
const CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: c_int = 76;
/// `CUDA_ERROR_NO_DEVICE`: cuInit's answer on a machine with a driver and no GPU.
const CUDA_ERROR_NO_DEVICE: c_int = 100;

type Ctx = *mut std::ffi::c_void;

/// The driver entry points libkvstore uses so far, resolved once.
struct Api {
    init: unsafe extern "C" fn(c_uint) -> c_int,
    driver_get_version: unsafe extern "C" fn(*mut c_int) -> c_int,
    device_get_count: unsafe extern "C" fn(*mut c_int) -> c_int,
    device_get: unsafe extern "C" fn(*mut c_int, c_int) -> c_int,
    device_get_attribute: unsafe extern "C" fn(*mut c_int, c_int, c_int) -> c_int,
    device_get_name: unsafe extern "C" fn(*mut c_char, c_int, c_int) -> c_int,
    primary_ctx_retain: unsafe extern "C" fn(*mut Ctx, c_int) -> c_int,
    ctx_push: unsafe extern "C" fn(Ctx) -> c_int,
    ctx_pop: unsafe extern "C" fn(*mut Ctx) -> c_int,
    mem_get_info: unsafe extern "C" fn(*mut usize, *mut usize) -> c_int,
}

/// One usable GPU.
#[derive(Debug, Clone)]
pub struct DeviceInfo {
    /// The ordinal, as in `gpu(ordinal)`.
    pub ordinal: i32,
    /// The device's name as the driver reports it.
    pub name: String,
    /// Compute capability (major, minor): the kernels are compiled for `sm_{major}{minor}`.
    pub compute_capability: (i32, i32),
}

/// The loaded driver and the devices it reported.
pub struct Runtime {
    api: Api,
    pid: u32,
    /// `cuDriverGetVersion`, e.g. 12080 for 12.8.
    pub driver_version: i32,
    /// The usable devices, by ordinal.
    pub devices: Vec<DeviceInfo>,
    primary: Vec<once_cell::sync::OnceCell<usize>>,
}

static RUNTIME: once_cell::sync::Lazy<Result<Runtime, String>> = once_cell::sync::Lazy::new(|| {
    match catch_unwind(AssertUnwindSafe(load)) {
        Ok(r) => r,
        Err(_) => Err("loading the CUDA driver failed unexpectedly (a panic in the driver bindings)".to_string()),
    }
});

/// The runtime, or why the GPU cannot be used by this process.
pub fn runtime() -> Result<&'static Runtime, String> {
    let rt = RUNTIME.as_ref().map_err(Clone::clone)?;
    let now = std::process::id();
    if rt.pid != now {
        return Err(format!(
            "CUDA was initialised in process {} before it forked; CUDA cannot be used in the forked child (pid {now})",
            rt.pid
        ));
    }
    Ok(rt)
}

/// Whether the driver library can be found at all, without initialising it.
fn driver_library_present() -> bool {
    // SAFETY: tries to dlopen the candidate names and drops what it opened; it does not
    // call into the library beyond its initialisers, as any CUDA program's loader does.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

fn resolve<T: Copy>(lib: &libloading::Library, name: &str) -> Result<T, String> {
    // SAFETY: `T` is the C prototype of `name` in CUDA 12's cuda.h (results as plain
    // c_int); the library stays loaded for the process (cudarc keeps it in a static).
    unsafe { lib.get::<T>(name.as_bytes()).map(|s| *s) }
        .map_err(|e| format!("the CUDA driver has no {name}: {e}"))
}

fn check(what: &str, code: c_int) -> Result<(), String> {
    if code == 0 {
        Ok(())
    } else {
        Err(format!("{what} failed with CUDA error {code}"))
    }
}

fn load() -> Result<Runtime, String> {
    if !driver_library_present() {
        return Err("the CUDA driver (libcuda.so.1) could not be loaded".to_string());
    }
    // SAFETY: presence was checked just above, so cudarc's loader finds a library and does
    // not panic; the returned library lives in cudarc's static for the process.
    let lib = unsafe { cudarc::driver::sys::culib() };
    let api = Api {
        init: resolve(lib, "cuInit")?,
        driver_get_version: resolve(lib, "cuDriverGetVersion")?,
        device_get_count: resolve(lib, "cuDeviceGetCount")?,
        device_get: resolve(lib, "cuDeviceGet")?,
        device_get_attribute: resolve(lib, "cuDeviceGetAttribute")?,
        device_get_name: resolve(lib, "cuDeviceGetName")?,
        primary_ctx_retain: resolve(lib, "cuDevicePrimaryCtxRetain")?,
        ctx_push: resolve(lib, "cuCtxPushCurrent_v2")?,
        ctx_pop: resolve(lib, "cuCtxPopCurrent_v2")?,
        mem_get_info: resolve(lib, "cuMemGetInfo_v2")?,
    };
    let mut version = 0;
    // SAFETY: a valid out-pointer; callable before cuInit.
    check("cuDriverGetVersion", unsafe { (api.driver_get_version)(&mut version) })?;
    if version < MIN_DRIVER_VERSION {
        return Err(format!(
            "the CUDA driver is too old: it supports CUDA {}.{}, libkvstore needs 12.0 or newer",
            version / 1000,
            version % 1000 / 10
        ));
    }
    // SAFETY: flags must be 0.
    let code = unsafe { (api.init)(0) };
    if code == CUDA_ERROR_NO_DEVICE {
        return Err("the CUDA driver reports no device".to_string());
    }
    check("cuInit", code)?;
    let mut count = 0;
    // SAFETY: a valid out-pointer, after a successful cuInit.
    check("cuDeviceGetCount", unsafe { (api.device_get_count)(&mut count) })?;
    let mut devices = Vec::new();
    for ordinal in 0..count {
        let mut dev = 0;
        // SAFETY: ordinal < count; valid out-pointer.
        check("cuDeviceGet", unsafe { (api.device_get)(&mut dev, ordinal) })?;
        let (mut major, mut minor) = (0, 0);
        // SAFETY: valid out-pointers and attribute codes of CUDA 12's enum.
        check("cuDeviceGetAttribute", unsafe {
            (api.device_get_attribute)(&mut major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)
        })?;
        // SAFETY: as above.
        check("cuDeviceGetAttribute", unsafe {
            (api.device_get_attribute)(&mut minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)
        })?;
        let mut name = [0 as c_char; 256];
        // SAFETY: the buffer holds `len` bytes; the driver NUL-terminates within it.
        check("cuDeviceGetName", unsafe { (api.device_get_name)(name.as_mut_ptr(), name.len() as c_int, dev) })?;
        // SAFETY: NUL-terminated by the driver within the buffer.
        let name = unsafe { std::ffi::CStr::from_ptr(name.as_ptr()) }.to_string_lossy().into_owned();
        devices.push(DeviceInfo { ordinal, name, compute_capability: (major, minor) });
    }
    let primary = devices.iter().map(|_| once_cell::sync::OnceCell::new()).collect();
    Ok(Runtime { api, pid: std::process::id(), driver_version: version, devices, primary })
}

impl Runtime {
    /// The device `gpu(ordinal)`, or a message saying why it does not exist.
    pub fn device(&self, ordinal: i32) -> Result<&DeviceInfo, String> {
        usize::try_from(ordinal).ok().and_then(|i| self.devices.get(i)).ok_or_else(|| {
            format!("gpu({ordinal}) does not exist: this machine has {} CUDA device(s)", self.devices.len())
        })
    }

    /// Runs `f` with the device's primary context current on this thread, restoring the
    /// caller's context afterwards (cudarc binds contexts and never restores them, so the
    /// store never leaves one bound on an application thread).
    fn with_context<T>(&self, ordinal: i32, f: impl FnOnce(&Api) -> Result<T, String>) -> Result<T, String> {
        let info = self.device(ordinal)?;
        let slot = &self.primary[info.ordinal as usize];
        let ctx = *slot.get_or_try_init(|| {
            let mut dev = 0;
            // SAFETY: the ordinal was validated; valid out-pointers.
            check("cuDeviceGet", unsafe { (self.api.device_get)(&mut dev, ordinal) })?;
            let mut ctx: Ctx = std::ptr::null_mut();
            // SAFETY: retains the primary context for the rest of the process (never released:
            // it is the process's context on that device).
            check("cuDevicePrimaryCtxRetain", unsafe { (self.api.primary_ctx_retain)(&mut ctx, dev) })?;
            Ok::<usize, String>(ctx as usize)
        })?;
        // SAFETY: a retained primary context.
        check("cuCtxPushCurrent", unsafe { (self.api.ctx_push)(ctx as Ctx) })?;
        let out = f(&self.api);
        let mut popped: Ctx = std::ptr::null_mut();
        // SAFETY: pops the context pushed above, restoring the thread's previous one.
        let pop = check("cuCtxPopCurrent", unsafe { (self.api.ctx_pop)(&mut popped) });
        let out = out?;
        pop?;
        Ok(out)
    }

    /// `(free, total)` bytes of device memory on `gpu(ordinal)`, from `cuMemGetInfo`.
    pub fn memory_info(&self, ordinal: i32) -> Result<(u64, u64), String> {
        self.with_context(ordinal, |api| {
            let (mut free, mut total) = (0usize, 0usize);
            // SAFETY: a context is current; valid out-pointers.
            check("cuMemGetInfo", unsafe { (api.mem_get_info)(&mut free, &mut total) })?;
            Ok((free as u64, total as u64))
        })
    }
}
