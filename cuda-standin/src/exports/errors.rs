//! Error descriptions, and the entry points the stand-in declines (export tables, proc
//! addresses).

use super::out;
use crate::call::{run, Needs};
use crate::result::*;
use std::ffi::{c_char, c_int, c_void};

fn describe_into(code: c_int, text: *mut *const c_char, name: bool) -> Result<(), CUresult> {
    let (n, d) = describe(code).ok_or(INVALID_VALUE)?;
    out(text, if name { n } else { d }.as_ptr().cast())
}

#[no_mangle]
pub extern "C" fn cuGetErrorString(error: c_int, text: *mut *const c_char) -> c_int {
    run("cuGetErrorString", Needs::Nothing, |_| describe_into(error, text, false))
}

#[no_mangle]
pub extern "C" fn cuGetErrorName(error: c_int, text: *mut *const c_char) -> c_int {
    run("cuGetErrorName", Needs::Nothing, |_| describe_into(error, text, true))
}

/// NVRTC 12.9 asks any loaded libcuda for its private export tables; "not supported" makes
/// it go on without them (a missing symbol makes it crash).
#[no_mangle]
pub extern "C" fn cuGetExportTable(table: *mut *const c_void, _id: *const c_void) -> c_int {
    run("cuGetExportTable", Needs::Nothing, |_| {
        if !table.is_null() {
            out(table, std::ptr::null())?;
        }
        Err(NOT_SUPPORTED)
    })
}

/// Driver entry points are only found by name (dlsym), never through cuGetProcAddress.
#[no_mangle]
pub extern "C" fn cuGetProcAddress(_symbol: *const c_char, pfn: *mut *mut c_void, _version: c_int, _flags: u64) -> c_int {
    run("cuGetProcAddress", Needs::Nothing, |_| {
        if !pfn.is_null() {
            out(pfn, std::ptr::null_mut())?;
        }
        Err(NOT_SUPPORTED)
    })
}

#[no_mangle]
pub extern "C" fn cuGetProcAddress_v2(_symbol: *const c_char, pfn: *mut *mut c_void, _version: c_int, _flags: u64, status: *mut c_int) -> c_int {
    run("cuGetProcAddress_v2", Needs::Nothing, |_| {
        if !pfn.is_null() {
            out(pfn, std::ptr::null_mut())?;
        }
        if !status.is_null() {
            out(status, 1)?; // CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND
        }
        Err(NOT_SUPPORTED)
    })
}
