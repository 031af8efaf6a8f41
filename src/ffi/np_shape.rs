//! The numpy-shape switch (`MXIsNumpyShape` / `MXSetIsNumpyShape`): libkvstore has MXNet's
//! classic shape semantics only, so the switch reads "off" and can only be set off. Gluon asks
//! for it on every parameter shape; answering lets Gluon code run instead of failing there.

#![allow(non_snake_case)]

use super::args::Out;
use std::os::raw::c_int;

/// Whether numpy shape semantics are on: always 0 (off).
///
/// Ownership: `*curr` is written on success.
pub extern "C" fn MXIsNumpyShape(curr: *mut c_int) -> c_int {
    ffi_boundary!({
        Out::new(curr, "curr")?.write(0);
        Ok(())
    })
}

/// Sets numpy shape semantics: 0 (off) is accepted and `*prev` gets 0; turning them on
/// answers -1 (libkvstore has classic shapes only) and changes nothing.
///
/// Ownership: `*prev` is written on success.
pub extern "C" fn MXSetIsNumpyShape(is_np_shape: c_int, prev: *mut c_int) -> c_int {
    ffi_boundary!({
        let prev = Out::new(prev, "prev")?;
        crate::ensure!(is_np_shape == 0, "numpy shape semantics ({is_np_shape}) are not supported by libkvstore: only 0 (classic shapes)");
        prev.write(0);
        Ok(())
    })
}
