//! The CUDA driver, loaded at run time: a lazily built [`Runtime`] or the reason there is none.
//!
//! cudarc panics when its library or one of its symbols is missing, and a panic's message goes
//! to stderr through the panic hook even when it is caught. So nothing here calls a cudarc
//! function that can panic: presence is checked with `is_culib_present()` first, and every
//! driver entry point is resolved through `culib().get(..)` (a `Result`) into a table typed
//! with plain `c_int` results (a driver newer than cudarc's enum may return codes it does not
//! list). `catch_unwind` stays as the last line, never the plan. Every entry point the GPU
//! backend uses is resolved at load: a driver lacking one is "absent", never half usable.

use std::ffi::c_void;
use std::os::raw::{c_char, c_int, c_uint};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// The oldest driver API this build accepts (CUDA 12.0, the API cudarc is built against).
pub const MIN_DRIVER_VERSION: c_int = 12000;

const CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: c_int = 75;
const CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: c_int = 76;
const CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: c_int = 16;
/// `CUDA_ERROR_NO_DEVICE`: cuInit's answer on a machine with a driver and no GPU.
const CUDA_ERROR_NO_DEVICE: c_int = 100;

/// `CUcontext`, `CUstream`, `CUevent`, `CUmodule`, `CUfunction`: opaque driver handles.
pub(crate) type Handle = *mut c_void;
/// `CUdeviceptr`.
pub(crate) type DevPtr = u64;

/// Declares the entry-point table: field, C symbol, prototype.
macro_rules! entry_points {
    ($($field:ident = $sym:literal : fn($($arg:ty),*);)*) => {
        /// The driver entry points libkvstore uses, resolved once (CUDA 12 `cuda.h` names,
        /// versioned as the header maps them). All are resolved at load, those not called yet
        /// included, so that a driver (or stand-in) lacking one is refused up front.
        #[allow(dead_code)]
        pub(crate) struct Api {
            $(pub(crate) $field: unsafe extern "C" fn($($arg),*) -> c_int,)*
        }

        fn resolve_all(lib: &libloading::Library) -> Result<Api, String> {
            Ok(Api { $($field: resolve(lib, $sym)?,)* })
        }
    };
}

entry_points! {
    init = "cuInit": fn(c_uint);
    driver_get_version = "cuDriverGetVersion": fn(*mut c_int);
    device_get_count = "cuDeviceGetCount": fn(*mut c_int);
    device_get = "cuDeviceGet": fn(*mut c_int, c_int);
    device_get_attribute = "cuDeviceGetAttribute": fn(*mut c_int, c_int, c_int);
    device_get_name = "cuDeviceGetName": fn(*mut c_char, c_int, c_int);
    device_total_mem = "cuDeviceTotalMem_v2": fn(*mut usize, c_int);
    device_can_access_peer = "cuDeviceCanAccessPeer": fn(*mut c_int, c_int, c_int);
    primary_ctx_retain = "cuDevicePrimaryCtxRetain": fn(*mut Handle, c_int);
    primary_ctx_release = "cuDevicePrimaryCtxRelease_v2": fn(c_int);
    ctx_push = "cuCtxPushCurrent_v2": fn(Handle);
    ctx_pop = "cuCtxPopCurrent_v2": fn(*mut Handle);
    ctx_set_current = "cuCtxSetCurrent": fn(Handle);
    ctx_get_current = "cuCtxGetCurrent": fn(*mut Handle);
    ctx_synchronize = "cuCtxSynchronize": fn();
    ctx_enable_peer_access = "cuCtxEnablePeerAccess": fn(Handle, c_uint);
    mem_get_info = "cuMemGetInfo_v2": fn(*mut usize, *mut usize);
    mem_alloc = "cuMemAlloc_v2": fn(*mut DevPtr, usize);
    mem_free = "cuMemFree_v2": fn(DevPtr);
    mem_alloc_async = "cuMemAllocAsync": fn(*mut DevPtr, usize, Handle);
    mem_free_async = "cuMemFreeAsync": fn(DevPtr, Handle);
    mem_host_alloc = "cuMemHostAlloc": fn(*mut *mut c_void, usize, c_uint);
    mem_free_host = "cuMemFreeHost": fn(*mut c_void);
    mem_host_register = "cuMemHostRegister_v2": fn(*mut c_void, usize, c_uint);
    mem_host_unregister = "cuMemHostUnregister": fn(*mut c_void);
    memcpy_htod = "cuMemcpyHtoD_v2": fn(DevPtr, *const c_void, usize);
    memcpy_dtoh = "cuMemcpyDtoH_v2": fn(*mut c_void, DevPtr, usize);
    memcpy_dtod = "cuMemcpyDtoD_v2": fn(DevPtr, DevPtr, usize);
    memcpy_htod_async = "cuMemcpyHtoDAsync_v2": fn(DevPtr, *const c_void, usize, Handle);
    memcpy_dtoh_async = "cuMemcpyDtoHAsync_v2": fn(*mut c_void, DevPtr, usize, Handle);
    memcpy_dtod_async = "cuMemcpyDtoDAsync_v2": fn(DevPtr, DevPtr, usize, Handle);
    memcpy_peer_async = "cuMemcpyPeerAsync": fn(DevPtr, Handle, DevPtr, Handle, usize, Handle);
    memset_d8 = "cuMemsetD8_v2": fn(DevPtr, u8, usize);
    memset_d8_async = "cuMemsetD8Async": fn(DevPtr, u8, usize, Handle);
    memset_d32_async = "cuMemsetD32Async": fn(DevPtr, c_uint, usize, Handle);
    stream_create = "cuStreamCreate": fn(*mut Handle, c_uint);
    stream_destroy = "cuStreamDestroy_v2": fn(Handle);
    stream_synchronize = "cuStreamSynchronize": fn(Handle);
    stream_query = "cuStreamQuery": fn(Handle);
    stream_wait_event = "cuStreamWaitEvent": fn(Handle, Handle, c_uint);
    launch_host_func = "cuLaunchHostFunc": fn(Handle, Option<unsafe extern "C" fn(*mut c_void)>, *mut c_void);
    event_create = "cuEventCreate": fn(*mut Handle, c_uint);
    event_destroy = "cuEventDestroy_v2": fn(Handle);
    event_record = "cuEventRecord": fn(Handle, Handle);
    event_query = "cuEventQuery": fn(Handle);
    event_synchronize = "cuEventSynchronize": fn(Handle);
    event_elapsed_time = "cuEventElapsedTime": fn(*mut f32, Handle, Handle);
    module_load_data = "cuModuleLoadData": fn(*mut Handle, *const c_void);
    module_unload = "cuModuleUnload": fn(Handle);
    module_get_function = "cuModuleGetFunction": fn(*mut Handle, Handle, *const c_char);
    launch_kernel = "cuLaunchKernel": fn(Handle, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, Handle, *mut *mut c_void, *mut *mut c_void);
    get_error_string = "cuGetErrorString": fn(c_int, *mut *const c_char);
    get_error_name = "cuGetErrorName": fn(c_int, *mut *const c_char);
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
    /// Streaming multiprocessors (sizes the grids).
    pub multiprocessors: i32,
}

/// The loaded driver and the devices it reported.
pub struct Runtime {
    pub(crate) api: Api,
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

/// Set in a child of `fork`: CUDA, initialised in the parent, cannot be used there. Read on
/// every driver use, where asking the kernel for the pid would cost a system call each time.
static FORKED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn mark_forked() {
    FORKED.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// The runtime, or why the GPU cannot be used by this process.
pub fn runtime() -> Result<&'static Runtime, String> {
    let rt = RUNTIME.as_ref().map_err(Clone::clone)?;
    if FORKED.load(std::sync::atomic::Ordering::Relaxed) {
        let now = std::process::id();
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

/// Err unless `code` is CUDA_SUCCESS, before the runtime exists (no error names yet).
fn check_raw(what: &str, code: c_int) -> Result<(), String> {
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
    let api = resolve_all(lib)?;
    let mut version = 0;
    // SAFETY: a valid out-pointer; callable before cuInit.
    check_raw("cuDriverGetVersion", unsafe { (api.driver_get_version)(&mut version) })?;
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
    check_raw("cuInit", code)?;
    let mut count = 0;
    // SAFETY: a valid out-pointer, after a successful cuInit.
    check_raw("cuDeviceGetCount", unsafe { (api.device_get_count)(&mut count) })?;
    let mut devices = Vec::new();
    for ordinal in 0..count {
        let mut dev = 0;
        // SAFETY: ordinal < count; valid out-pointer.
        check_raw("cuDeviceGet", unsafe { (api.device_get)(&mut dev, ordinal) })?;
        let attribute = |attr: c_int| {
            let mut v = 0;
            // SAFETY: a valid out-pointer and an attribute code of CUDA 12's enum.
            check_raw("cuDeviceGetAttribute", unsafe { (api.device_get_attribute)(&mut v, attr, dev) }).map(|()| v)
        };
        let major = attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
        let minor = attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
        let multiprocessors = attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?.max(1);
        let mut name = [0 as c_char; 256];
        // SAFETY: the buffer holds `len` bytes; the driver NUL-terminates within it.
        check_raw("cuDeviceGetName", unsafe { (api.device_get_name)(name.as_mut_ptr(), name.len() as c_int, dev) })?;
        // SAFETY: NUL-terminated by the driver within the buffer.
        let name = unsafe { std::ffi::CStr::from_ptr(name.as_ptr()) }.to_string_lossy().into_owned();
        devices.push(DeviceInfo { ordinal, name, compute_capability: (major, minor), multiprocessors });
    }
    let primary = devices.iter().map(|_| once_cell::sync::OnceCell::new()).collect();
    // SAFETY: registers a handler that only stores to an atomic (async-signal-safe), run in
    // the child after a fork; handlers stay registered for the process, as needed.
    if unsafe { libc::pthread_atfork(None, None, Some(mark_forked)) } != 0 {
        return Err("pthread_atfork failed: the CUDA runtime could not guard against fork".to_string());
    }
    Ok(Runtime { api, pid: std::process::id(), driver_version: version, devices, primary })
}

impl Runtime {
    /// The device `gpu(ordinal)`, or a message saying why it does not exist.
    pub fn device(&self, ordinal: i32) -> Result<&DeviceInfo, String> {
        usize::try_from(ordinal).ok().and_then(|i| self.devices.get(i)).ok_or_else(|| {
            format!("gpu({ordinal}) does not exist: this machine has {} CUDA device(s)", self.devices.len())
        })
    }

    /// The driver's name and description of `code`, e.g. `CUDA_ERROR_OUT_OF_MEMORY (out of memory)`.
    pub fn error_text(&self, code: c_int) -> String {
        let text = |f: unsafe extern "C" fn(c_int, *mut *const c_char) -> c_int| {
            let mut p: *const c_char = std::ptr::null();
            // SAFETY: a valid out-pointer; the driver returns a static string or an error.
            if unsafe { f(code, &mut p) } != 0 || p.is_null() {
                return None;
            }
            // SAFETY: a NUL-terminated static string of the driver.
            Some(unsafe { std::ffi::CStr::from_ptr(p) }.to_string_lossy().into_owned())
        };
        match (text(self.api.get_error_name), text(self.api.get_error_string)) {
            (Some(name), Some(desc)) => format!("{name} ({desc})"),
            (Some(name), None) => name,
            _ => format!("CUDA error {code}"),
        }
    }

    /// Err naming the device, the entry point and the driver's error unless `code` is 0.
    pub fn check(&self, ordinal: i32, what: &str, code: c_int) -> Result<(), String> {
        if code == 0 {
            Ok(())
        } else {
            Err(format!("gpu({ordinal}): {what} failed: {}", self.error_text(code)))
        }
    }

    /// The device's primary context, retained at first use for the rest of the process.
    pub(crate) fn primary_context(&self, ordinal: i32) -> Result<Handle, String> {
        let info = self.device(ordinal)?;
        let slot = &self.primary[info.ordinal as usize];
        let ctx = *slot.get_or_try_init(|| {
            let mut dev = 0;
            // SAFETY: the ordinal was validated; valid out-pointers.
            self.check(ordinal, "cuDeviceGet", unsafe { (self.api.device_get)(&mut dev, ordinal) })?;
            let mut ctx: Handle = std::ptr::null_mut();
            // SAFETY: retains the primary context for the rest of the process (never released:
            // it is the process's context on that device).
            self.check(ordinal, "cuDevicePrimaryCtxRetain", unsafe { (self.api.primary_ctx_retain)(&mut ctx, dev) })?;
            Ok::<usize, String>(ctx as usize)
        })?;
        Ok(ctx as Handle)
    }

    /// Runs `f` with the device's primary context current on this thread, restoring the
    /// caller's context afterwards (an application thread may have its own context bound;
    /// the store never leaves one of its own behind).
    pub(crate) fn with_context<T>(&self, ordinal: i32, f: impl FnOnce(&Api) -> Result<T, String>) -> Result<T, String> {
        let ctx = self.primary_context(ordinal)?;
        // SAFETY: a retained primary context.
        self.check(ordinal, "cuCtxPushCurrent", unsafe { (self.api.ctx_push)(ctx) })?;
        let out = f(&self.api);
        let mut popped: Handle = std::ptr::null_mut();
        // SAFETY: pops the context pushed above, restoring the thread's previous one.
        let pop = self.check(ordinal, "cuCtxPopCurrent", unsafe { (self.api.ctx_pop)(&mut popped) });
        let out = out?;
        pop?;
        Ok(out)
    }

    /// `(free, total)` bytes of device memory on `gpu(ordinal)`, from `cuMemGetInfo`.
    pub fn memory_info(&self, ordinal: i32) -> Result<(u64, u64), String> {
        self.with_context(ordinal, |api| {
            let (mut free, mut total) = (0usize, 0usize);
            // SAFETY: a context is current; valid out-pointers.
            self.check(ordinal, "cuMemGetInfo", unsafe { (api.mem_get_info)(&mut free, &mut total) })?;
            Ok((free as u64, total as u64))
        })
    }
}
