//! The panic boundary every export runs in: 0 on success; -1 with the last error set on an
//! error or a panic. No panic unwinds into C.

use crate::error::Result;
use std::any::Any;
use std::os::raw::c_int;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Runs `body` for the C function whose path `here` names (see [`export_name`]) and turns its
/// outcome into MXNet's 0 / -1.
pub(crate) fn call(here: &'static str, body: impl FnOnce() -> Result<()>) -> c_int {
    let checked = || super::fork::check(|| export_name(here)).and_then(|()| body());
    match super::quiet_panics::inside(|| catch_unwind(AssertUnwindSafe(checked))) {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => {
            super::last_error::set(export_name(here), e.message());
            -1
        }
        Err(payload) => {
            let at = super::quiet_panics::take_location().map_or(String::new(), |l| format!(" at {l}"));
            super::last_error::set(export_name(here), &format!("internal error (panic): {}{at}", panic_text(&*payload)));
            -1
        }
    }
}

/// The export's name from the type name of a function item declared inside it
/// (`kvstore::ffi::runtime::MXGetVersion::here` gives `MXGetVersion`); only computed on failure.
pub(crate) fn export_name(here: &'static str) -> &'static str {
    let mut parts = here.rsplit("::");
    parts.next();
    parts.next().unwrap_or(here)
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

/// Wraps the body of an export: `ffi_boundary!({ ...; Ok(()) })`. The export's name, which
/// prefixes its error messages, is the enclosing function's, found by the compiler.
macro_rules! ffi_boundary {
    ($body:block) => {{
        fn here() {}
        $crate::ffi::boundary::call(::std::any::type_name_of_val(&here), || -> $crate::error::Result<()> { $body })
    }};
    // The old form, for branches written before the name was derived: the literal is ignored
    // (tests/header_abi.rs refuses it in src/ffi, so it does not stay).
    ($name:literal, $body:block) => {
        ffi_boundary!($body)
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panics_and_errors_become_minus_one_with_a_message() {
        assert_eq!(call("m::Ok::here", || Ok(())), 0);
        assert_eq!(call("m::Fails::here", || Err(crate::Error::new("bad thing"))), -1);
        assert_eq!(super::super::last_error::get_for_test(), "MXNetError: Fails: bad thing");
        assert_eq!(call("m::Panics::here", || panic!("boom")), -1);
        assert!(super::super::last_error::get_for_test().contains("Panics: internal error (panic): boom at src/ffi/boundary.rs:"));
    }

    #[allow(non_snake_case)]
    fn MXSomeExport() -> c_int {
        ffi_boundary!({ Err(crate::Error::new("no")) })
    }

    #[test]
    fn the_export_name_is_the_enclosing_function() {
        assert_eq!(MXSomeExport(), -1);
        assert_eq!(super::super::last_error::get_for_test(), "MXNetError: MXSomeExport: no");
    }
}
