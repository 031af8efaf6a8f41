//! Kernel launches: the checks against the device's limits, the copy of the parameters, and
//! the run of the host build on the stream's thread with device addresses translated.

use crate::context::Context;
use crate::devices::{MAX_BLOCK, MAX_GRID, MAX_THREADS_PER_BLOCK};
use crate::host_kernels::{self, Dim3};
use crate::memory::{self, Span};
use crate::module::Function;
use crate::result::*;
use crate::stream::Work;
use parking_lot::Mutex;
use std::ffi::{c_int, c_void};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Refuses a launch the device could not run, with CUDA_ERROR_INVALID_VALUE as the driver.
pub fn check(function: &Function, grid: Dim3, block: Dim3, shared: u32) -> Result<(), CUresult> {
    let g = [grid.x, grid.y, grid.z];
    let b = [block.x, block.y, block.z];
    let threads = b.iter().map(|&d| d as u64).product::<u64>();
    let fits = |dims: [u32; 3], max: [u32; 3]| dims.iter().zip(max).all(|(&d, m)| d >= 1 && d <= m);
    if !fits(g, MAX_GRID) || !fits(b, MAX_BLOCK) || threads > MAX_THREADS_PER_BLOCK as u64 || shared > function.max_dynamic_shared.load(Ordering::Relaxed) {
        return Err(INVALID_VALUE);
    }
    Ok(())
}

/// cuLaunchKernel's parameters, copied (the caller may reuse its values at once).
pub struct Parameters(Vec<Vec<u64>>);

impl Parameters {
    /// # Safety
    /// `params` holds one pointer per parameter of `function`, each to a value of its size.
    pub unsafe fn copy(function: &Function, params: *mut *mut c_void) -> Result<Parameters, CUresult> {
        if function.params.is_empty() {
            return Ok(Parameters(Vec::new()));
        }
        if params.is_null() {
            return Err(INVALID_VALUE);
        }
        let mut copies = Vec::with_capacity(function.params.len());
        for (i, &size) in function.params.iter().enumerate() {
            let mut words = vec![0u64; size.div_ceil(8).max(1)];
            // SAFETY: the contract: params[i] points to `size` readable bytes.
            unsafe {
                let value = *params.add(i);
                if value.is_null() {
                    return Err(INVALID_VALUE);
                }
                std::ptr::copy_nonoverlapping(value.cast::<u8>(), words.as_mut_ptr().cast::<u8>(), size);
            }
            copies.push(words);
        }
        Ok(Parameters(copies))
    }
}

/// What the translate callback of one running launch sees: the launching context, and the
/// spans it translated (held so their memory outlives a concurrent free).
struct Scope {
    context: Arc<Context>,
    held: Mutex<Vec<Span>>,
}

/// The registry's translate callback (cpu/standin_kernels.h): 0 and the host address, or 700.
unsafe extern "C" fn translate(scope: *mut c_void, address: u64, host: *mut *mut c_void) -> c_int {
    let outcome = std::panic::catch_unwind(|| {
        if address == 0 {
            return Ok(std::ptr::null_mut());
        }
        // SAFETY: `scope` is the Scope `work` passes, alive for the whole run.
        let scope = unsafe { &*(scope as *const Scope) };
        let span = memory::span(&scope.context, address, 0)?;
        let pointer = span.get()?;
        scope.held.lock().push(span);
        Ok(pointer.cast::<c_void>())
    });
    match outcome {
        Ok(Ok(pointer)) if !host.is_null() => {
            // SAFETY: non-null out-pointer from the registry.
            unsafe { *host = pointer };
            SUCCESS
        }
        Ok(Ok(_)) => INVALID_VALUE,
        Ok(Err(code)) => code,
        Err(_) => UNKNOWN,
    }
}

/// The stream work of one launch: the whole grid on the stream's thread.
pub fn work(function: &Function, context: Arc<Context>, parameters: Parameters, grid: Dim3, block: Dim3, shared: u32) -> Work {
    let index = function.index;
    Box::new(move || {
        let mut values = parameters.0;
        let mut pointers: Vec<*mut c_void> = values.iter_mut().map(|v| v.as_mut_ptr().cast::<c_void>()).collect();
        let scope = Scope { context, held: Mutex::new(Vec::new()) };
        // SAFETY: one pointer per parameter, each to a copy of the caller's value; `scope`
        // outlives the call.
        let code = unsafe { host_kernels::run(index, pointers.as_mut_ptr(), grid, block, shared, translate, &scope as *const Scope as *mut c_void) };
        match code {
            SUCCESS => Ok(()),
            code => Err(code),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    fn function() -> Function {
        Function { handle: 1, module: 2, name: "k".into(), params: vec![], index: 0, max_dynamic_shared: AtomicU32::new(48 * 1024) }
    }

    fn d(x: u32, y: u32, z: u32) -> Dim3 {
        Dim3 { x, y, z }
    }

    #[test]
    fn launches_are_checked_against_an_h100s_limits() {
        let f = function();
        assert_eq!(check(&f, d(i32::MAX as u32, 65535, 65535), d(1024, 1, 1), 48 * 1024), Ok(()));
        assert_eq!(check(&f, d(1, 1, 1), d(8, 8, 16), 0), Ok(()));
        for (grid, block, shared) in [
            (d(0, 1, 1), d(1, 1, 1), 0),
            (d(1, 1, 1), d(1, 0, 1), 0),
            (d(1 << 31, 1, 1), d(1, 1, 1), 0),
            (d(1, 65536, 1), d(1, 1, 1), 0),
            (d(1, 1, 65536), d(1, 1, 1), 0),
            (d(1, 1, 1), d(1025, 1, 1), 0),
            (d(1, 1, 1), d(1, 1, 65), 0),
            (d(1, 1, 1), d(64, 16, 2), 0),
            (d(1, 1, 1), d(1, 1, 1), 48 * 1024 + 1),
        ] {
            assert_eq!(check(&f, grid, block, shared), Err(INVALID_VALUE), "{grid:?} {block:?} {shared}");
        }
        f.max_dynamic_shared.store(227 * 1024, Ordering::Relaxed);
        assert_eq!(check(&f, d(1, 1, 1), d(1, 1, 1), 227 * 1024), Ok(()));
    }
}
