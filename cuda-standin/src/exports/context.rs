//! Contexts: create/destroy, the current-context stack, synchronisation, peer access.

use super::{as_pointer, handle, out};
use crate::call::{run, Needs};
use crate::context::{self, Context};
use crate::devices;
use crate::result::*;
use std::ffi::{c_int, c_uint, c_void};

#[no_mangle]
pub extern "C" fn cuCtxCreate_v2(pctx: *mut *mut c_void, _flags: c_uint, device: c_int) -> c_int {
    run("cuCtxCreate_v2", Needs::Init, |call| {
        call.fields.device = Some(device);
        if pctx.is_null() {
            return Err(INVALID_VALUE);
        }
        let created = Context::create(device)?;
        out(pctx, as_pointer(created.handle))?;
        context::push(created);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn cuCtxDestroy_v2(ctx: *mut c_void) -> c_int {
    run("cuCtxDestroy_v2", Needs::Init, |call| {
        let doomed = Context::lookup(handle(ctx))?;
        call.fields.device = Some(doomed.device);
        doomed.destroy()
    })
}

#[no_mangle]
pub extern "C" fn cuCtxPushCurrent_v2(ctx: *mut c_void) -> c_int {
    run("cuCtxPushCurrent_v2", Needs::Init, |_| {
        context::push(Context::lookup(handle(ctx))?);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn cuCtxPopCurrent_v2(pctx: *mut *mut c_void) -> c_int {
    run("cuCtxPopCurrent_v2", Needs::Init, |_| {
        let popped = context::pop().ok_or(INVALID_CONTEXT)?;
        if !pctx.is_null() {
            out(pctx, as_pointer(popped.handle))?;
        }
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn cuCtxSetCurrent(ctx: *mut c_void) -> c_int {
    run("cuCtxSetCurrent", Needs::Init, |_| {
        let new = match handle(ctx) {
            0 => None,
            h => Some(Context::lookup(h)?),
        };
        context::set_current(new);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn cuCtxGetCurrent(pctx: *mut *mut c_void) -> c_int {
    run("cuCtxGetCurrent", Needs::Init, |_| out(pctx, as_pointer(context::current_if_any().map_or(0, |c| c.handle))))
}

#[no_mangle]
pub extern "C" fn cuCtxGetDevice(device: *mut c_int) -> c_int {
    run("cuCtxGetDevice", Needs::Init, |_| out(device, context::current()?.device))
}

#[no_mangle]
pub extern "C" fn cuCtxGetApiVersion(ctx: *mut c_void, version: *mut c_uint) -> c_int {
    run("cuCtxGetApiVersion", Needs::Init, |_| {
        match handle(ctx) {
            0 => context::current()?,
            h => Context::lookup(h)?,
        };
        out(version, 12000)
    })
}

/// Waits for all work of the current context; a synchronising call (see the trace).
#[no_mangle]
pub extern "C" fn cuCtxSynchronize() -> c_int {
    run("cuCtxSynchronize", Needs::Init, |_| {
        let current = context::current_if_any().ok_or(INVALID_CONTEXT)?;
        current.synchronize()
    })
}

fn peer_device(peer: *mut c_void) -> Result<c_int, CUresult> {
    let peer = Context::lookup(handle(peer))?;
    devices::get(peer.device)?;
    Ok(peer.device)
}

#[no_mangle]
pub extern "C" fn cuCtxEnablePeerAccess(peer: *mut c_void, flags: c_uint) -> c_int {
    run("cuCtxEnablePeerAccess", Needs::Init, |call| {
        if flags != 0 {
            return Err(INVALID_VALUE);
        }
        let device = peer_device(peer)?;
        call.fields.add("peer", device);
        context::current()?.enable_peer(device)
    })
}

#[no_mangle]
pub extern "C" fn cuCtxDisablePeerAccess(peer: *mut c_void) -> c_int {
    run("cuCtxDisablePeerAccess", Needs::Init, |call| {
        let device = peer_device(peer)?;
        call.fields.add("peer", device);
        context::current()?.disable_peer(device)
    })
}
