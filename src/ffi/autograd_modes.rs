//! Autograd's mode switches (`MXAutograd{Is,SetIs}{Recording,Training}`), which Gluon flips
//! around parameter initialisation and training steps. libkvstore records no graph, so
//! recording stays off (turning it on answers -1); the training flag is kept per thread, as
//! MXNet keeps it, though no op of libkvstore depends on it.

#![allow(non_snake_case)]

use super::args::Out;
use std::cell::Cell;
use std::os::raw::c_int;

thread_local! {
    static TRAINING: Cell<bool> = const { Cell::new(false) };
}

/// Whether autograd records: always false.
///
/// Ownership: `*curr` is written on success.
pub extern "C" fn MXAutogradIsRecording(curr: *mut bool) -> c_int {
    ffi_boundary!({
        Out::new(curr, "curr")?.write(false);
        Ok(())
    })
}

/// Sets recording: 0 is accepted (`*prev` gets 0); 1 answers -1 (no autograd in libkvstore).
///
/// Ownership: `*prev` is written on success.
pub extern "C" fn MXAutogradSetIsRecording(is_recording: c_int, prev: *mut c_int) -> c_int {
    ffi_boundary!({
        let prev = Out::new(prev, "prev")?;
        crate::ensure!(is_recording == 0, "autograd recording is not supported by libkvstore (is_recording={is_recording})");
        prev.write(0);
        Ok(())
    })
}

/// Whether the calling thread is in training mode.
///
/// Ownership: `*curr` is written on success.
pub extern "C" fn MXAutogradIsTraining(curr: *mut bool) -> c_int {
    ffi_boundary!({
        Out::new(curr, "curr")?.write(TRAINING.with(Cell::get));
        Ok(())
    })
}

/// Sets the calling thread's training mode (non-zero: on); `*prev` gets the previous mode.
///
/// Ownership: `*prev` is written on success.
pub extern "C" fn MXAutogradSetIsTraining(is_training: c_int, prev: *mut c_int) -> c_int {
    ffi_boundary!({
        let prev = Out::new(prev, "prev")?;
        prev.write(TRAINING.with(|t| t.replace(is_training != 0)) as c_int);
        Ok(())
    })
}

/// Marks arrays as autograd variables with gradient buffers (what Gluon does when it
/// allocates a parameter's gradient). Without recording there is no graph to attach them to,
/// so after checking the arrays and requests this has no effect; `backward` answers -1.
///
/// Ownership: none (the arrays stay the caller's).
pub extern "C" fn MXAutogradMarkVariables(num_var: u32, var_handles: *mut *mut std::os::raw::c_void, reqs_array: *mut u32, grad_handles: *mut *mut std::os::raw::c_void) -> c_int {
    ffi_boundary!({
        let n = num_var as usize;
        let vars = super::args::slice(var_handles, n, "var_handles")?;
        let grads = super::args::slice(grad_handles, n, "grad_handles")?;
        let reqs = super::args::slice(reqs_array, n, "reqs_array")?;
        super::handle::ndarrays(vars, "var_handles")?;
        super::handle::ndarrays(grads, "grad_handles")?;
        if let Some(bad) = reqs.iter().find(|&&r| r > 3) {
            crate::bail!("grad request {bad} is not one of 0 (null), 1 (write), 2 (in place), 3 (add)");
        }
        Ok(())
    })
}
