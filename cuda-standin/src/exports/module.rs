//! Modules, functions and kernel launches.

use super::{as_pointer, handle, out, stream_of};
use crate::call::{run, Needs};
use crate::context;
use crate::devices::SHARED_PER_BLOCK_OPTIN;
use crate::host_kernels::Dim3;
use crate::image;
use crate::launch::{self, Parameters};
use crate::module::{Function, Module};
use crate::result::*;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::sync::atomic::Ordering;

fn load(pmodule: *mut *mut c_void, image: *const c_void, call: &mut crate::call::Call) -> Result<(), CUresult> {
    context::current()?;
    if pmodule.is_null() {
        return Err(INVALID_VALUE);
    }
    // SAFETY: cuModuleLoadData's contract: a complete image.
    let kernels = unsafe { image::read(image.cast()) }?;
    call.fields.add("kernels", kernels.len());
    out(pmodule, as_pointer(Module::load(kernels).handle))
}

#[no_mangle]
pub extern "C" fn cuModuleLoadData(pmodule: *mut *mut c_void, image: *const c_void) -> c_int {
    run("cuModuleLoadData", Needs::Init, |call| load(pmodule, image, call))
}

/// JIT options are accepted and ignored (nothing is compiled).
#[no_mangle]
pub extern "C" fn cuModuleLoadDataEx(pmodule: *mut *mut c_void, image: *const c_void, _n: c_uint, _options: *mut c_int, _values: *mut *mut c_void) -> c_int {
    run("cuModuleLoadDataEx", Needs::Init, |call| load(pmodule, image, call))
}

#[no_mangle]
pub extern "C" fn cuModuleUnload(module: *mut c_void) -> c_int {
    run("cuModuleUnload", Needs::Init, |_| Module::unload(handle(module)))
}

fn name_of<'a>(name: *const c_char) -> Result<&'a str, CUresult> {
    if name.is_null() {
        return Err(INVALID_VALUE);
    }
    // SAFETY: a non-null, NUL-terminated name by the API's contract.
    unsafe { CStr::from_ptr(name) }.to_str().map_err(|_| NOT_FOUND)
}

#[no_mangle]
pub extern "C" fn cuModuleGetFunction(pfunction: *mut *mut c_void, module: *mut c_void, name: *const c_char) -> c_int {
    run("cuModuleGetFunction", Needs::Init, |call| {
        let name = name_of(name)?;
        call.fields.add("kernel", name);
        let function = Module::lookup(handle(module))?.function(name)?;
        out(pfunction, as_pointer(function.handle))
    })
}

/// The kernels define no `__device__`/`__constant__` variables, so there is none to find.
#[no_mangle]
pub extern "C" fn cuModuleGetGlobal_v2(_dptr: *mut u64, _bytes: *mut usize, module: *mut c_void, name: *const c_char) -> c_int {
    run("cuModuleGetGlobal_v2", Needs::Init, |call| {
        call.fields.add("global", name_of(name)?);
        Module::lookup(handle(module))?;
        Err(NOT_FOUND)
    })
}

#[no_mangle]
pub extern "C" fn cuFuncGetAttribute(value: *mut c_int, attribute: c_int, function: *mut c_void) -> c_int {
    run("cuFuncGetAttribute", Needs::Init, |call| {
        call.fields.add("attribute", attribute);
        let f = Function::lookup(handle(function))?;
        out(
            value,
            match attribute {
                0 => crate::devices::MAX_THREADS_PER_BLOCK as c_int,
                1..=3 => 0, // static shared, constant and local bytes
                4 => 32,    // registers
                5 | 6 => 90, // PTX and binary version
                7 => 0,
                8 => f.max_dynamic_shared.load(Ordering::Relaxed) as c_int,
                9 => -1,
                _ => return Err(INVALID_VALUE),
            },
        )
    })
}

#[no_mangle]
pub extern "C" fn cuFuncSetAttribute(function: *mut c_void, attribute: c_int, value: c_int) -> c_int {
    run("cuFuncSetAttribute", Needs::Init, |call| {
        call.fields.add("attribute", attribute);
        let f = Function::lookup(handle(function))?;
        match attribute {
            8 if (0..=SHARED_PER_BLOCK_OPTIN as c_int).contains(&value) => {
                f.max_dynamic_shared.store(value as u32, Ordering::Relaxed);
                Ok(())
            }
            9 if (-1..=100).contains(&value) => Ok(()),
            _ => Err(INVALID_VALUE),
        }
    })
}

#[no_mangle]
pub extern "C" fn cuFuncSetCacheConfig(function: *mut c_void, _config: c_int) -> c_int {
    run("cuFuncSetCacheConfig", Needs::Init, |_| Function::lookup(handle(function)).map(|_| ()))
}

#[no_mangle]
pub extern "C" fn cuLaunchKernel(
    function: *mut c_void,
    grid_x: c_uint,
    grid_y: c_uint,
    grid_z: c_uint,
    block_x: c_uint,
    block_y: c_uint,
    block_z: c_uint,
    shared: c_uint,
    stream: *mut c_void,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> c_int {
    run("cuLaunchKernel", Needs::Init, |call| {
        call.fields.stream = Some(handle(stream));
        let f = Function::lookup(handle(function))?;
        let (grid, block) = (Dim3 { x: grid_x, y: grid_y, z: grid_z }, Dim3 { x: block_x, y: block_y, z: block_z });
        call.fields.add("kernel", &f.name);
        call.fields.add("grid", format_args!("{grid_x}x{grid_y}x{grid_z}"));
        call.fields.add("block", format_args!("{block_x}x{block_y}x{block_z}"));
        call.fields.add("shared", shared);
        if !extra.is_null() {
            return Err(NOT_SUPPORTED); // CU_LAUNCH_PARAM_BUFFER_POINTER: libkvstore passes kernelParams
        }
        let (queue, ctx) = stream_of(stream)?;
        launch::check(&f, grid, block, shared)?;
        // SAFETY: cuLaunchKernel's contract: one pointer per parameter of the kernel.
        let parameters = unsafe { Parameters::copy(&f, params) }?;
        queue.enqueue(&ctx, Vec::new(), call.deferred_fault, launch::work(&f, ctx.clone(), parameters, grid, block, shared));
        Ok(())
    })
}
