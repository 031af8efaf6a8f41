//! Initialisation, driver version, devices and their primary contexts.

use super::{as_pointer, out};
use crate::call::{mark_initialized, run, Needs};
use crate::config::config;
use crate::context;
use crate::devices;
use crate::result::*;
use std::ffi::{c_char, c_int, c_uint, c_void};

#[no_mangle]
pub extern "C" fn cuInit(flags: c_uint) -> c_int {
    run("cuInit", Needs::Nothing, |_| {
        if flags != 0 {
            return Err(INVALID_VALUE);
        }
        if devices::count() == 0 {
            return Err(NO_DEVICE);
        }
        mark_initialized();
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn cuDriverGetVersion(version: *mut c_int) -> c_int {
    run("cuDriverGetVersion", Needs::Nothing, |_| out(version, config().driver_version))
}

#[no_mangle]
pub extern "C" fn cuDeviceGetCount(count: *mut c_int) -> c_int {
    run("cuDeviceGetCount", Needs::Init, |_| out(count, devices::count() as c_int))
}

#[no_mangle]
pub extern "C" fn cuDeviceGet(device: *mut c_int, ordinal: c_int) -> c_int {
    run("cuDeviceGet", Needs::Init, |call| {
        call.fields.device = Some(ordinal);
        devices::get(ordinal)?;
        out(device, ordinal)
    })
}

#[no_mangle]
pub extern "C" fn cuDeviceGetAttribute(value: *mut c_int, attribute: c_int, device: c_int) -> c_int {
    run("cuDeviceGetAttribute", Needs::Init, |call| {
        call.fields.device = Some(device);
        call.fields.add("attribute", attribute);
        devices::get(device)?;
        out(value, devices::attribute(attribute, device)?)
    })
}

/// Copies `text` and a NUL into `buffer` of `len` bytes, truncating as the driver does.
fn copy_string(text: &str, buffer: *mut c_char, len: c_int) -> Result<(), CUresult> {
    if buffer.is_null() || len <= 0 {
        return Err(INVALID_VALUE);
    }
    let n = text.len().min(len as usize - 1);
    // SAFETY: `buffer` is valid for `len` bytes (the caller's contract), and n + 1 <= len.
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr(), buffer.cast::<u8>(), n);
        *buffer.add(n) = 0;
    }
    Ok(())
}

#[no_mangle]
pub extern "C" fn cuDeviceGetName(name: *mut c_char, len: c_int, device: c_int) -> c_int {
    run("cuDeviceGetName", Needs::Init, |call| {
        call.fields.device = Some(device);
        devices::get(device)?;
        copy_string(devices::NAME, name, len)
    })
}

#[no_mangle]
pub extern "C" fn cuDeviceGetPCIBusId(bus_id: *mut c_char, len: c_int, device: c_int) -> c_int {
    run("cuDeviceGetPCIBusId", Needs::Init, |call| {
        call.fields.device = Some(device);
        devices::get(device)?;
        copy_string(&format!("0000:{:02x}:00.0", devices::attribute(33, device)?), bus_id, len)
    })
}

fn uuid(uuid: *mut [u8; 16], device: c_int) -> Result<(), CUresult> {
    devices::get(device)?;
    let mut bytes = *b"cuda-standin-dev";
    bytes[15] = device as u8;
    out(uuid, bytes)
}

#[no_mangle]
pub extern "C" fn cuDeviceGetUuid(id: *mut [u8; 16], device: c_int) -> c_int {
    run("cuDeviceGetUuid", Needs::Init, |_| uuid(id, device))
}

#[no_mangle]
pub extern "C" fn cuDeviceGetUuid_v2(id: *mut [u8; 16], device: c_int) -> c_int {
    run("cuDeviceGetUuid_v2", Needs::Init, |_| uuid(id, device))
}

#[no_mangle]
pub extern "C" fn cuDeviceTotalMem_v2(bytes: *mut usize, device: c_int) -> c_int {
    run("cuDeviceTotalMem_v2", Needs::Init, |call| {
        call.fields.device = Some(device);
        out(bytes, devices::get(device)?.memory_info().1 as usize)
    })
}

#[no_mangle]
pub extern "C" fn cuDeviceCanAccessPeer(can: *mut c_int, device: c_int, peer: c_int) -> c_int {
    run("cuDeviceCanAccessPeer", Needs::Init, |call| {
        call.fields.device = Some(device);
        devices::get(device)?;
        devices::get(peer)?;
        out(can, (device != peer) as c_int)
    })
}

#[no_mangle]
pub extern "C" fn cuDevicePrimaryCtxRetain(pctx: *mut *mut c_void, device: c_int) -> c_int {
    run("cuDevicePrimaryCtxRetain", Needs::Init, |call| {
        call.fields.device = Some(device);
        if pctx.is_null() {
            return Err(INVALID_VALUE);
        }
        out(pctx, as_pointer(context::primary_retain(device)?.handle))
    })
}

#[no_mangle]
pub extern "C" fn cuDevicePrimaryCtxRelease_v2(device: c_int) -> c_int {
    run("cuDevicePrimaryCtxRelease_v2", Needs::Init, |call| {
        call.fields.device = Some(device);
        context::primary_release(device)
    })
}

#[no_mangle]
pub extern "C" fn cuDevicePrimaryCtxReset_v2(device: c_int) -> c_int {
    run("cuDevicePrimaryCtxReset_v2", Needs::Init, |call| {
        call.fields.device = Some(device);
        context::primary_reset(device)
    })
}

#[no_mangle]
pub extern "C" fn cuDevicePrimaryCtxGetState(device: c_int, flags: *mut c_uint, active: *mut c_int) -> c_int {
    run("cuDevicePrimaryCtxGetState", Needs::Init, |call| {
        call.fields.device = Some(device);
        let is_active = context::primary_state(device)?;
        out(flags, 0)?;
        out(active, is_active as c_int)
    })
}

#[no_mangle]
pub extern "C" fn cuDevicePrimaryCtxSetFlags_v2(device: c_int, _flags: c_uint) -> c_int {
    run("cuDevicePrimaryCtxSetFlags_v2", Needs::Init, |call| {
        call.fields.device = Some(device);
        devices::get(device).map(|_| ())
    })
}
