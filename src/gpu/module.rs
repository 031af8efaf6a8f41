//! The kernels of `kernels/` loaded into each device's context: compiled by NVRTC at the
//! first launch on a device (CUBIN for its sm, see [`super::kernels`]), loaded with
//! `cuModuleLoadData`, functions looked up by name once and kept for the process.

use super::driver::{runtime, Handle};
use super::kernels::{images_for, unit_of};
use super::nvrtc::nvrtc;
use once_cell::sync::{Lazy, OnceCell};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::ffi::CString;

/// One device's loaded modules and the functions found so far.
struct Loaded {
    modules: Vec<usize>,
    functions: Mutex<HashMap<String, usize>>,
}

static LOADED: Lazy<Vec<OnceCell<Loaded>>> =
    Lazy::new(|| (0..runtime().map_or(0, |rt| rt.devices.len())).map(|_| OnceCell::new()).collect());

fn load(ordinal: i32) -> Result<Loaded, String> {
    let rt = runtime()?;
    let info = rt.device(ordinal)?;
    let nvrtc = nvrtc().map_err(|e| format!("gpu({ordinal}): the kernels cannot be compiled: {e}"))?;
    let target = nvrtc.target_for(info.compute_capability)?;
    let images = images_for(nvrtc, target)?;
    let modules = rt.with_context(ordinal, |api| {
        let mut modules = Vec::with_capacity(images.units.len());
        for (file, image) in &images.units {
            let mut m: Handle = std::ptr::null_mut();
            // SAFETY: a CUBIN or NUL-terminated PTX image from NVRTC; the context is current.
            rt.check(ordinal, &format!("cuModuleLoadData({file})"), unsafe { (api.module_load_data)(&mut m, image.as_ptr().cast()) })?;
            modules.push(m as usize);
        }
        Ok(modules)
    })?;
    Ok(Loaded { modules, functions: Mutex::new(HashMap::new()) })
}

/// The kernel `name` on `gpu(ordinal)` (compiling and loading the kernels at first use).
pub(crate) fn function(ordinal: i32, name: &str) -> Result<Handle, String> {
    let rt = runtime()?;
    rt.device(ordinal)?;
    let loaded = LOADED[ordinal as usize].get_or_try_init(|| load(ordinal))?;
    if let Some(f) = loaded.functions.lock().get(name) {
        return Ok(*f as Handle);
    }
    let c_name = CString::new(name).map_err(|_| format!("bad kernel name {name:?}"))?;
    // Its own unit's module first (the others only for a name no source declares).
    let own = unit_of(name).and_then(|i| loaded.modules.get(i).copied());
    let found = rt.with_context(ordinal, |api| {
        for &m in own.iter().chain(loaded.modules.iter().filter(|&&m| Some(m) != own)) {
            let mut f: Handle = std::ptr::null_mut();
            // SAFETY: a loaded module; a NUL-terminated name; valid out-pointer.
            if unsafe { (api.module_get_function)(&mut f, m as Handle, c_name.as_ptr()) } == 0 {
                return Ok(f as usize);
            }
        }
        Err(format!("gpu({ordinal}): no kernel named {name} in kernels/"))
    })?;
    loaded.functions.lock().insert(name.to_string(), found);
    Ok(found as Handle)
}
