//! Loaded modules and their functions, resolved to the host build of the kernels.

use crate::handles::{next_handle, Table};
use crate::host_kernels;
use crate::image::Kernel;
use crate::result::*;
use std::ffi::c_int;
use std::sync::atomic::AtomicU32;
use std::sync::Arc;

pub struct Module {
    pub handle: u64,
    kernels: Vec<Kernel>,
}

pub struct Function {
    pub handle: u64,
    pub module: u64,
    pub name: String,
    /// Byte size of each parameter (copied at launch).
    pub params: Vec<usize>,
    /// The kernel's index in the host build.
    pub index: c_int,
    /// CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES.
    pub max_dynamic_shared: AtomicU32,
}

static MODULES: Table<Module> = Table::new();
static FUNCTIONS: Table<Function> = Table::new();

impl Module {
    pub fn load(kernels: Vec<Kernel>) -> Arc<Module> {
        let module = Arc::new(Module { handle: next_handle(), kernels });
        MODULES.insert(module.handle, module.clone());
        module
    }

    pub fn lookup(handle: u64) -> Result<Arc<Module>, CUresult> {
        MODULES.get(handle).ok_or(INVALID_HANDLE)
    }

    /// Unloads the module; its functions' handles die with it.
    pub fn unload(handle: u64) -> Result<(), CUresult> {
        MODULES.remove(handle).ok_or(INVALID_HANDLE)?;
        for function in FUNCTIONS.filter(|f| f.module == handle) {
            FUNCTIONS.remove(function.handle);
        }
        Ok(())
    }

    /// A kernel the image defines and the host build has, or CUDA_ERROR_NOT_FOUND.
    pub fn function(&self, name: &str) -> Result<Arc<Function>, CUresult> {
        let kernel = self.kernels.iter().find(|k| k.name == name).ok_or(NOT_FOUND)?;
        let index = host_kernels::find(name).ok_or(NOT_FOUND)?;
        let function = Arc::new(Function {
            handle: next_handle(),
            module: self.handle,
            name: kernel.name.clone(),
            params: kernel.params.clone(),
            index,
            max_dynamic_shared: AtomicU32::new(crate::devices::SHARED_PER_BLOCK),
        });
        FUNCTIONS.insert(function.handle, function.clone());
        Ok(function)
    }
}

impl Function {
    pub fn lookup(handle: u64) -> Result<Arc<Function>, CUresult> {
        FUNCTIONS.get(handle).ok_or(INVALID_HANDLE)
    }
}
