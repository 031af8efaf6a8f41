//! The C types of MXNet's API. The typedefs themselves are written into the header by
//! cbindgen.toml (`after_includes`): MXNet declares the callbacks as function types, which
//! cbindgen cannot express.

#![allow(non_camel_case_types)]

use std::os::raw::{c_char, c_int, c_void};

/// `typedef uint32_t mx_uint;`
pub type mx_uint = u32;
/// `typedef void *NDArrayHandle;`
pub type NDArrayHandle = *mut c_void;
/// `typedef void *KVStoreHandle;`
pub type KVStoreHandle = *mut c_void;
/// `typedef void *ProfileHandle;`
pub type ProfileHandle = *mut c_void;
/// `typedef void (MXKVStoreUpdater)(int key, NDArrayHandle recv, NDArrayHandle local, void *handle);`
pub type MXKVStoreUpdater = Option<unsafe extern "C" fn(c_int, NDArrayHandle, NDArrayHandle, *mut c_void)>;
/// `typedef void (MXKVStoreStrUpdater)(const char *key, NDArrayHandle recv, NDArrayHandle local, void *handle);`
pub type MXKVStoreStrUpdater =
    Option<unsafe extern "C" fn(*const c_char, NDArrayHandle, NDArrayHandle, *mut c_void)>;
/// `typedef void (MXKVStoreServerController)(int head, const char *body, void *controller_handle);`
pub type MXKVStoreServerController = Option<unsafe extern "C" fn(c_int, *const c_char, *mut c_void)>;
/// `typedef void (*ExecutorMonitorCallback)(const char*, NDArrayHandle, void*);`
pub type ExecutorMonitorCallback = Option<unsafe extern "C" fn(*const c_char, NDArrayHandle, *mut c_void)>;
/// MXNet's `struct MXCallbackList` (custom ops' callback table); never read by libkvstore.
#[repr(C)]
pub struct MXCallbackList {
    _opaque: [u8; 0],
}
/// `typedef int (*CustomOpPropCreator)(const char*, const int, const char**, const char**, struct MXCallbackList*);`
pub type CustomOpPropCreator =
    Option<unsafe extern "C" fn(*const c_char, c_int, *mut *const c_char, *mut *const c_char, *mut MXCallbackList) -> c_int>;
/// `struct LibFeature { const char* name; bool enabled; };`
#[repr(C)]
pub struct LibFeature {
    /// The feature's name, a static string.
    pub name: *const c_char,
    /// Whether the library was built with it.
    pub enabled: bool,
}
/// `typedef void (*CachedOpMonitorCallback)(const char*, const char*, NDArrayHandle);`
pub type CachedOpMonitorCallback = Option<unsafe extern "C" fn(*const c_char, *const c_char, NDArrayHandle)>;
/// `typedef void (*EngineAsyncFunc)(void*, void*, void*);`
pub type EngineAsyncFunc = Option<unsafe extern "C" fn(*mut c_void, *mut c_void, *mut c_void)>;
/// `typedef void (*EngineSyncFunc)(void*, void*);`
pub type EngineSyncFunc = Option<unsafe extern "C" fn(*mut c_void, *mut c_void)>;
/// `typedef void (*EngineFuncParamDeleter)(void*);`
pub type EngineFuncParamDeleter = Option<unsafe extern "C" fn(*mut c_void)>;
/// c_predict_api.h's `typedef void (*PredMonitorCallback)(const char*, NDArrayHandle, void*);`
pub type PredMonitorCallback = Option<unsafe extern "C" fn(*const c_char, NDArrayHandle, *mut c_void)>;
