//! The exported C entry points of CUDA 12's `cuda.h` (versioned names, `int` results), one
//! file per API family; `crate::symbols::EXPORTED` lists them all. Each body runs inside
//! [`crate::call::run`], which injects faults, keeps panics in and writes the trace.

mod context;
mod copy;
mod device;
mod errors;
mod memory;
mod module;
mod stream;

use crate::context::Context;
use crate::result::*;
use crate::stream::Stream;
use std::ffi::c_void;
use std::sync::Arc;

/// Writes an out-parameter; a null pointer is CUDA_ERROR_INVALID_VALUE.
fn out<T>(pointer: *mut T, value: T) -> Result<(), CUresult> {
    if pointer.is_null() {
        return Err(INVALID_VALUE);
    }
    // SAFETY: non-null, and the driver API's contract makes it valid for a write of T.
    unsafe { pointer.write_unaligned(value) };
    Ok(())
}

/// A handle as the C API passes it.
fn handle(pointer: *mut c_void) -> u64 {
    pointer as u64
}

fn as_pointer(handle: u64) -> *mut c_void {
    handle as *mut c_void
}

/// CUstream → the stream and its context: 0, CU_STREAM_LEGACY (1) and CU_STREAM_PER_THREAD
/// (2) are the current context's legacy default stream (per-thread behaves as legacy here).
fn stream_of(stream: *mut c_void) -> Result<(Arc<Stream>, Arc<Context>), CUresult> {
    match handle(stream) {
        0..=2 => {
            let context = crate::context::current()?;
            Ok((context.legacy(), context))
        }
        h => {
            let stream = Stream::lookup(h).ok_or(INVALID_HANDLE)?;
            let context = stream.context.upgrade().ok_or(INVALID_CONTEXT)?;
            context.check()?;
            Ok((stream, context))
        }
    }
}
