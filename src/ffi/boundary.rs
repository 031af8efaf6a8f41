//! The panic boundary every export runs in: 0 on success; -1 with the last error set on an
//! error or a panic. No panic unwinds into C.

use crate::error::Result;
use std::any::Any;
use std::os::raw::c_int;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Runs `body` for the C function `name` and turns its outcome into MXNet's 0 / -1.
pub(crate) fn call(name: &'static str, body: impl FnOnce() -> Result<()>) -> c_int {
    match super::quiet_panics::inside(|| catch_unwind(AssertUnwindSafe(body))) {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => {
            super::last_error::set(name, e.message());
            -1
        }
        Err(payload) => {
            let at = super::quiet_panics::take_location().map_or(String::new(), |l| format!(" at {l}"));
            super::last_error::set(name, &format!("internal error (panic): {}{at}", panic_text(&*payload)));
            -1
        }
    }
}

fn panic_text(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic payload".to_string()
    }
}

/// Wraps the body of an export: `ffi_boundary!(<C name literal>, { ...; Ok(()) })`.
macro_rules! ffi_boundary {
    ($name:literal, $body:block) => {
        $crate::ffi::boundary::call($name, || -> $crate::error::Result<()> { $body })
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panics_and_errors_become_minus_one_with_a_message() {
        assert_eq!(call("Ok", || Ok(())), 0);
        assert_eq!(call("Fails", || Err(crate::Error::new("bad thing"))), -1);
        assert_eq!(super::super::last_error::get_for_test(), "MXNetError: Fails: bad thing");
        assert_eq!(call("Panics", || panic!("boom")), -1);
        assert!(super::super::last_error::get_for_test().contains("Panics: internal error (panic): boom at src/ffi/boundary.rs:"));
    }
}
