//! The host library: `dlopen`ed privately (`RTLD_LOCAL`, so its symbols never preempt
//! libkvstore's), its version checked, and the few functions the hosted store calls.

use crate::ffi::{EngineAsyncFunc, EngineFuncParamDeleter, NDArrayHandle};
use crate::{DType, Result};
use libloading::os::unix::{Library, RTLD_LOCAL, RTLD_NOW};
use std::ffi::{CStr, CString};
use std::os::raw::{c_char, c_int, c_void};

/// MXNet 1.9's `Context` (`{DeviceType dev_type; int32_t dev_id;}`), as the host's engine
/// functions take it.
#[repr(C)]
pub(super) struct HostContext {
    dev_type: c_int,
    dev_id: c_int,
}

/// cpu(0): where the store's own host ops run.
pub(super) static CPU0: HostContext = HostContext { dev_type: 1, dev_id: 0 };

/// MXNet's storage-type codes of dense and row_sparse arrays.
pub(super) const DENSE: c_int = 0;
pub(super) const ROW_SPARSE: c_int = 1;

/// What a host array is: its shape, element type and storage-type code.
pub(super) struct Described {
    pub shape: Vec<i64>,
    pub dtype: DType,
    pub stype: c_int,
}

/// Describes a host array the caller passed (NULL refused).
pub(super) fn describe(host: &Host, array: NDArrayHandle) -> Result<Described> {
    crate::ensure!(!array.is_null(), "NULL NDArray handle");
    let (shape, dtype, stype) = host.describe(array)?;
    Ok(Described { shape, dtype: DType::from_code(dtype)?, stype })
}

/// The host's C functions the store calls, typed as MXNet 1.9's c_api.h declares them.
pub(crate) struct Api {
    pub get_last_error: unsafe extern "C" fn() -> *const c_char,
    pub set_last_error: unsafe extern "C" fn(*const c_char),
    pub get_op_handle: unsafe extern "C" fn(*const c_char, *mut *mut c_void) -> c_int,
    pub imperative_invoke: unsafe extern "C" fn(
        *mut c_void,
        c_int,
        *mut NDArrayHandle,
        *mut c_int,
        *mut *mut NDArrayHandle,
        c_int,
        *const *const c_char,
        *const *const c_char,
    ) -> c_int,
    pub push_async_nd: unsafe extern "C" fn(
        EngineAsyncFunc,
        *mut c_void,
        EngineFuncParamDeleter,
        *const c_void,
        *mut NDArrayHandle,
        c_int,
        *mut NDArrayHandle,
        c_int,
        *const c_void,
        c_int,
        *const c_char,
        bool,
    ) -> c_int,
    pub shallow_copy: unsafe extern "C" fn(NDArrayHandle, *mut NDArrayHandle) -> c_int,
    pub free: unsafe extern "C" fn(NDArrayHandle) -> c_int,
    pub get_shape_ex: unsafe extern "C" fn(NDArrayHandle, *mut c_int, *mut *const c_int) -> c_int,
    pub get_dtype: unsafe extern "C" fn(NDArrayHandle, *mut c_int) -> c_int,
    pub get_storage_type: unsafe extern "C" fn(NDArrayHandle, *mut c_int) -> c_int,
    pub from_dlpack_ex: unsafe extern "C" fn(*mut c_void, bool, *mut NDArrayHandle) -> c_int,
    pub wait_to_write: unsafe extern "C" fn(NDArrayHandle) -> c_int,
    pub wait_to_read: unsafe extern "C" fn(NDArrayHandle) -> c_int,
    pub create_ex: unsafe extern "C" fn(*const u32, u32, c_int, c_int, c_int, c_int, *mut NDArrayHandle) -> c_int,
    pub create_sparse_ex: unsafe extern "C" fn(
        c_int,
        *const u32,
        u32,
        c_int,
        c_int,
        c_int,
        c_int,
        u32,
        *mut c_int,
        *mut u32,
        *const u32,
        *mut NDArrayHandle,
    ) -> c_int,
    pub sync_copy_to_cpu: unsafe extern "C" fn(NDArrayHandle, *mut c_void, usize) -> c_int,
    pub wait_all: unsafe extern "C" fn() -> c_int,
    pub set_is_recording: unsafe extern "C" fn(c_int, *mut c_int) -> c_int,
    pub notify_shutdown: unsafe extern "C" fn() -> c_int,
    pub get_data: unsafe extern "C" fn(NDArrayHandle, *mut *mut c_void) -> c_int,
    pub get_context: unsafe extern "C" fn(NDArrayHandle, *mut c_int, *mut c_int) -> c_int,
    pub to_dlpack: unsafe extern "C" fn(NDArrayHandle, *mut *mut c_void) -> c_int,
    pub call_dlpack_deleter: unsafe extern "C" fn(*mut c_void) -> c_int,
}

/// A loaded host library (never unloaded: its engine threads run until the process ends).
pub(crate) struct Host {
    library: Library,
    pub api: Api,
    /// Building the engine's failure object, when the host and libstdc++ allow it.
    pub errors: Option<super::host_error::ErrorApi>,
    /// The host's `_copyto` operator: every read and write of a host array goes through it,
    /// since only the host understands its layouts (oneDNN).
    pub copyto: usize,
}

impl Host {
    /// Opens `path`, refusing anything but MXNet 1.9.x.
    pub fn load(path: &str) -> Result<Host> {
        // SAFETY: loading a library runs its initialisers; the user named it as an MXNet build.
        let library = unsafe { Library::open(Some(path), RTLD_NOW | RTLD_LOCAL) }.map_err(|e| {
            crate::Error::new(format!(
                "{}={path}: cannot load it: {e}",
                super::HOST_LIBRARY_VAR
            ))
        })?;
        let version = {
            // SAFETY: MXGetVersion(int*) in every MXNet; the out-pointer is a live local.
            let get: unsafe extern "C" fn(*mut c_int) -> c_int =
                unsafe { symbol(&library, path, "MXGetVersion")? };
            let mut v = 0;
            // SAFETY: as above.
            if unsafe { get(&mut v) } != 0 {
                crate::bail!("{}={path}: MXGetVersion failed", super::HOST_LIBRARY_VAR);
            }
            v
        };
        crate::ensure!(
            version / 100 == 109,
            "{}={path} is MXNet {}.{}.{} ({version}); hosted mode needs MXNet 1.9.x, whose engine-callback and context layouts it relies on",
            super::HOST_LIBRARY_VAR,
            version / 10000,
            version / 100 % 100,
            version % 100
        );
        // SAFETY (every symbol): the types are MXNet 1.9's prototypes of these names.
        let api = unsafe {
            Api {
                get_last_error: symbol(&library, path, "MXGetLastError")?,
                set_last_error: symbol(&library, path, "NNAPISetLastError")?,
                get_op_handle: symbol(&library, path, "NNGetOpHandle")?,
                imperative_invoke: symbol(&library, path, "MXImperativeInvoke")?,
                push_async_nd: symbol(&library, path, "MXEnginePushAsyncND")?,
                shallow_copy: symbol(&library, path, "MXShallowCopyNDArray")?,
                free: symbol(&library, path, "MXNDArrayFree")?,
                get_shape_ex: symbol(&library, path, "MXNDArrayGetShapeEx")?,
                get_dtype: symbol(&library, path, "MXNDArrayGetDType")?,
                get_storage_type: symbol(&library, path, "MXNDArrayGetStorageType")?,
                from_dlpack_ex: symbol(&library, path, "MXNDArrayFromDLPackEx")?,
                wait_to_write: symbol(&library, path, "MXNDArrayWaitToWrite")?,
                wait_to_read: symbol(&library, path, "MXNDArrayWaitToRead")?,
                create_ex: symbol(&library, path, "MXNDArrayCreateEx")?,
                create_sparse_ex: symbol(&library, path, "MXNDArrayCreateSparseEx")?,
                sync_copy_to_cpu: symbol(&library, path, "MXNDArraySyncCopyToCPU")?,
                wait_all: symbol(&library, path, "MXNDArrayWaitAll")?,
                set_is_recording: symbol(&library, path, "MXAutogradSetIsRecording")?,
                notify_shutdown: symbol(&library, path, "MXNotifyShutdown")?,
                get_data: symbol(&library, path, "MXNDArrayGetData")?,
                get_context: symbol(&library, path, "MXNDArrayGetContext")?,
                to_dlpack: symbol(&library, path, "MXNDArrayToDLPack")?,
                call_dlpack_deleter: symbol(&library, path, "MXNDArrayCallDLPackDeleter")?,
            }
        };
        let op = |name: &CStr| -> Result<usize> {
            let mut op = std::ptr::null_mut();
            // SAFETY: a NUL-terminated name and a live out-pointer.
            let rc = unsafe { (api.get_op_handle)(name.as_ptr(), &mut op) };
            crate::ensure!(
                rc == 0 && !op.is_null(),
                "{}={path}: the host has no {} operator",
                super::HOST_LIBRARY_VAR,
                name.to_string_lossy()
            );
            Ok(op as usize)
        };
        // SAFETY: a data symbol's address, not dereferenced here.
        let vtable = unsafe { library.get::<*const c_void>(b"_ZTVN4dmlc5ErrorE\0") }.ok().map(|s| *s as usize);
        Ok(Host {
            errors: super::host_error::ErrorApi::resolve(vtable),
            copyto: op(c"_copyto")?,
            library,
            api,
        })
    }

    /// The address of the host's function `name`, if it exports it.
    pub fn address(&self, name: &str) -> Option<*mut ()> {
        let name = CString::new(name).ok()?;
        // SAFETY: only the address is taken; nothing is called here.
        unsafe {
            self.library
                .get::<*mut ()>(name.as_bytes_with_nul())
                .ok()
                .map(|s| *s)
        }
    }

    /// The host's last error, for a failed host call.
    pub fn last_error(&self) -> String {
        // SAFETY: MXGetLastError returns a NUL-terminated thread-local string.
        let p = unsafe { (self.api.get_last_error)() };
        if p.is_null() {
            return String::new();
        }
        // SAFETY: non-null, NUL-terminated, valid until the next failing call on this thread.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }

    /// `Ok` for a host status 0, else the host's error for `what`.
    pub fn check(&self, rc: c_int, what: &str) -> Result<()> {
        if rc == 0 {
            Ok(())
        } else {
            crate::bail!("{what} failed in the host: {}", self.last_error())
        }
    }

    /// `_copyto(src -> dst)`: one host engine op reading `src`, writing `dst`.
    pub fn copy(&self, src: NDArrayHandle, dst: NDArrayHandle) -> Result<()> {
        self.invoke(self.copyto, "_copyto", &[src], dst, &[])
    }

    /// One host operator with the given inputs and string parameters, written into `dst`
    /// (an array the caller holds): one host engine op reading the inputs, writing `dst`.
    /// Autograd does not record it: a store's copies are not part of the caller's graph (MXNet's
    /// own store copies with `CopyFromTo`, outside autograd), and Gluon pulls row_sparse
    /// weights inside `autograd.record()`, into arrays already in the graph, which a recorded
    /// op may not write.
    pub fn invoke(
        &self,
        op: usize,
        name: &str,
        inputs: &[NDArrayHandle],
        dst: NDArrayHandle,
        params: &[(&CStr, &CStr)],
    ) -> Result<()> {
        let mut inputs = inputs.to_vec();
        let mut outputs = [dst];
        let mut outputs_ptr = outputs.as_mut_ptr();
        let mut num_outputs: c_int = 1;
        let keys: Vec<*const c_char> = params.iter().map(|(k, _)| k.as_ptr()).collect();
        let values: Vec<*const c_char> = params.iter().map(|(_, v)| v.as_ptr()).collect();
        let mut recording: c_int = 0;
        // SAFETY: MXAutogradSetIsRecording sets the calling thread's flag and returns the old
        // one through a live local.
        let paused = unsafe { (self.api.set_is_recording)(0, &mut recording) } == 0;
        // SAFETY: MXImperativeInvoke with live input handles, one caller-provided output and
        // NUL-terminated parameters; every pointer is a live local for the call.
        let rc = unsafe {
            (self.api.imperative_invoke)(
                op as *mut c_void,
                inputs.len() as c_int,
                inputs.as_mut_ptr(),
                &mut num_outputs,
                &mut outputs_ptr,
                params.len() as c_int,
                keys.as_ptr(),
                values.as_ptr(),
            )
        };
        if paused && recording != 0 {
            let mut previous: c_int = 0;
            // SAFETY: as above: the thread's flag goes back to what it was.
            unsafe { (self.api.set_is_recording)(recording, &mut previous) };
        }
        self.check(rc, name)
    }

    /// The dense array's elements, raw, after its pending writes (blocks the caller).
    pub fn read(&self, array: NDArrayHandle, bytes: usize, elements: usize) -> Result<Vec<u8>> {
        let mut data = vec![0u8; bytes];
        // SAFETY: `bytes` is `elements` of the array's own dtype, the size the host writes.
        let rc = unsafe { (self.api.sync_copy_to_cpu)(array, data.as_mut_ptr() as *mut c_void, elements) };
        self.check(rc, "MXNDArraySyncCopyToCPU")?;
        Ok(data)
    }

    /// Waits for the host's pending ops on `array`, then frees this handle.
    pub fn release(&self, array: NDArrayHandle) {
        if super::shut_down() {
            return;
        }
        // SAFETY: a live handle the store owns; nothing uses it afterwards.
        unsafe {
            (self.api.wait_to_write)(array);
            (self.api.free)(array);
        }
    }

    /// Frees this handle without waiting (the host keeps what its queued ops need).
    pub fn forget(&self, array: NDArrayHandle) {
        if super::shut_down() {
            return;
        }
        // SAFETY: a live handle the store owns; nothing uses it afterwards.
        unsafe { (self.api.free)(array) };
    }

    /// The device-type code of a host array's context (1 cpu, 2 gpu, 3 cpu_pinned, 5 cpu_shared).
    pub fn device_type(&self, array: NDArrayHandle) -> Result<c_int> {
        let (mut dev_type, mut dev_id) = (0, 0);
        // SAFETY: a live host handle and live out-pointers.
        self.check(unsafe { (self.api.get_context)(array, &mut dev_type, &mut dev_id) }, "MXNDArrayGetContext")?;
        Ok(dev_type)
    }

    /// The start of a dense host array's memory in the plain layout (`MXNDArrayGetData`: an
    /// array in a oneDNN layout is first reordered, waiting for its writers).
    pub fn data_ptr(&self, array: NDArrayHandle) -> Result<*mut u8> {
        let mut data: *mut c_void = std::ptr::null_mut();
        // SAFETY: a live host handle and a live out-pointer.
        self.check(unsafe { (self.api.get_data)(array, &mut data) }, "MXNDArrayGetData")?;
        Ok(data as *mut u8)
    }

    /// Blocks until the host's pending reads and writes of `array` are done.
    pub fn wait_to_write(&self, array: NDArrayHandle) -> Result<()> {
        // SAFETY: a live host handle.
        self.check(unsafe { (self.api.wait_to_write)(array) }, "MXNDArrayWaitToWrite")
    }

    /// A new host handle sharing `array`'s memory and engine variable; the receiver frees it.
    pub fn shallow_copy(&self, array: NDArrayHandle) -> Result<NDArrayHandle> {
        let mut out = std::ptr::null_mut();
        // SAFETY: a live host handle and a live out-pointer.
        self.check(
            unsafe { (self.api.shallow_copy)(array, &mut out) },
            "MXShallowCopyNDArray",
        )?;
        Ok(out)
    }

    /// New handles over `a` and `b` for an updater call (the frontend frees them); neither is
    /// left made when the second cannot be.
    pub fn shallow_copies(&self, a: NDArrayHandle, b: NDArrayHandle) -> Result<(NDArrayHandle, NDArrayHandle)> {
        let first = self.shallow_copy(a)?;
        match self.shallow_copy(b) {
            Ok(second) => Ok((first, second)),
            Err(e) => {
                self.forget(first);
                Err(e)
            }
        }
    }

    /// Shape, dtype code and storage-type code of a host array.
    pub fn describe(&self, array: NDArrayHandle) -> Result<(Vec<i64>, c_int, c_int)> {
        let (mut ndim, mut dims, mut dtype, mut stype) = (0, std::ptr::null(), 0, 0);
        // SAFETY: a host handle from the caller and live out-pointers.
        unsafe {
            self.check(
                (self.api.get_shape_ex)(array, &mut ndim, &mut dims),
                "MXNDArrayGetShapeEx",
            )?;
            let shape = if ndim > 0 && !dims.is_null() {
                std::slice::from_raw_parts(dims, ndim as usize)
                    .iter()
                    .map(|&d| d as i64)
                    .collect()
            } else {
                Vec::new()
            };
            self.check((self.api.get_dtype)(array, &mut dtype), "MXNDArrayGetDType")?;
            self.check(
                (self.api.get_storage_type)(array, &mut stype),
                "MXNDArrayGetStorageType",
            )?;
            Ok((shape, dtype, stype))
        }
    }

    /// Records `text` as the calling thread's last error in the host, where the frontend's
    /// `MXGetLastError` (forwarded to the host) reads it.
    pub fn set_last_error(&self, text: &str) {
        let text = CString::new(text.replace('\0', " ")).unwrap_or_default();
        // SAFETY: a NUL-terminated string, read during the call.
        unsafe { (self.api.set_last_error)(text.as_ptr()) }
    }
}

/// The function `name` of `library` as a `T` (a function-pointer type).
///
/// # Safety
/// `T` must be the function's C type.
unsafe fn symbol<T: Copy>(library: &Library, path: &str, name: &str) -> Result<T> {
    let c = CString::new(name).map_err(|_| crate::Error::new("symbol name with NUL"))?;
    // SAFETY: the caller guarantees the type.
    unsafe { library.get::<T>(c.as_bytes_with_nul()) }
        .map(|s| *s)
        .map_err(|e| {
            crate::Error::new(format!(
                "{}={path}: it does not export {name}: {e}",
                super::HOST_LIBRARY_VAR
            ))
        })
}
