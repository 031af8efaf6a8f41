//! What every exported entry point does around its body: refuse calls before cuInit and in a
//! process forked after cuInit, inject planned faults, keep panics inside, write the trace.

use crate::context;
use crate::faults::{self, Fault};
use crate::result::*;
use crate::trace::{self, Fields};
use std::ffi::c_int;
use std::sync::atomic::{AtomicI32, Ordering};

/// The pid that called cuInit successfully (0: not yet). Another pid is a forked child: as
/// with the real driver, nothing it inherited works; every call answers
/// CUDA_ERROR_NOT_INITIALIZED.
static INIT_PID: AtomicI32 = AtomicI32::new(0);

fn pid() -> i32 {
    // SAFETY: getpid takes no arguments and cannot fail.
    unsafe { libc::getpid() }
}

pub fn mark_initialized() {
    let _ = INIT_PID.compare_exchange(0, pid(), Ordering::AcqRel, Ordering::Acquire);
}

/// Whether this process may use the driver: initialised, and not a child forked after.
fn usable() -> Result<(), CUresult> {
    match INIT_PID.load(Ordering::Acquire) {
        0 => Err(NOT_INITIALIZED),
        p if p != pid() => Err(NOT_INITIALIZED),
        _ => Ok(()),
    }
}

/// One call in progress: the body fills in what the trace reports.
pub struct Call {
    pub fields: Fields,
    /// An injected fault the body must turn into failing stream work.
    pub deferred_fault: bool,
}

/// When the entry point may run.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Needs {
    /// After cuInit, in the process that called it.
    Init,
    /// At any time (cuInit, cuDriverGetVersion, cuGetErrorString, …); a forked child is
    /// still refused.
    Nothing,
}

/// Runs `body` as entry point `name` and answers its CUresult.
pub fn run(name: &'static str, needs: Needs, body: impl FnOnce(&mut Call) -> Result<(), CUresult>) -> c_int {
    let mut call = Call { fields: Fields::default(), deferred_fault: false };
    let result = (|| {
        match usable() {
            Err(code) if needs == Needs::Init || INIT_PID.load(Ordering::Acquire) != 0 => return code,
            _ => {}
        }
        match faults::on_call(name) {
            Some(Fault::Immediate(code)) => {
                if code == ILLEGAL_ADDRESS {
                    if let Some(context) = context::current_if_any() {
                        context.fail(code);
                    }
                }
                return code;
            }
            Some(Fault::Deferred) => call.deferred_fault = true,
            None => {}
        }
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| body(&mut call))) {
            Ok(Ok(())) => SUCCESS,
            Ok(Err(code)) => code,
            Err(_) => UNKNOWN,
        }
    })();
    if trace::enabled() {
        if call.fields.device.is_none() {
            call.fields.device = context::current_if_any().map(|c| c.device);
        }
        trace::record(name, &call.fields, result);
    }
    result
}
