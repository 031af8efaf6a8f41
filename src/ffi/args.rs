//! C arguments to Rust values: every pointer is checked for NULL (arrays only when their
//! length is not zero) and reported by its parameter name.

use crate::error::Result;
use std::ffi::CStr;
use std::os::raw::c_char;
use std::ptr::NonNull;

/// An out-parameter, checked non-NULL up front and written only once the call has succeeded.
pub(crate) struct Out<T>(NonNull<T>);

impl<T> Out<T> {
    /// Checks `p`.
    pub(crate) fn new(p: *mut T, arg: &str) -> Result<Out<T>> {
        NonNull::new(p).map(Out).ok_or_else(|| crate::Error::new(format!("{arg} is NULL")))
    }

    /// Writes the result.
    pub(crate) fn write(self, value: T) {
        // SAFETY: the pointer is non-NULL, and MXNet's C contract makes the caller pass a
        // pointer to writable memory for one `T`. `write` does not read or drop the old value.
        unsafe { self.0.as_ptr().write(value) }
    }
}

/// The `n` elements at `p`; NULL is allowed when `n` is 0.
pub(crate) fn slice<'a, T>(p: *const T, n: usize, arg: &str) -> Result<&'a [T]> {
    if n == 0 {
        return Ok(&[]);
    }
    crate::ensure!(!p.is_null(), "{arg} is NULL but {n} elements were announced");
    // SAFETY: non-NULL, and the caller's contract is that `p` points to `n` initialised
    // elements that stay valid and unwritten for the duration of the call.
    Ok(unsafe { std::slice::from_raw_parts(p, n) })
}

/// The `n` writable bytes at `p`; NULL is allowed when `n` is 0.
pub(crate) fn bytes_mut<'a>(p: *mut u8, n: usize, arg: &str) -> Result<&'a mut [u8]> {
    if n == 0 {
        return Ok(&mut []);
    }
    crate::ensure!(!p.is_null(), "{arg} is NULL");
    // SAFETY: non-NULL, and the caller's contract is that `p` points to `n` writable bytes
    // not otherwise accessed during the call.
    Ok(unsafe { std::slice::from_raw_parts_mut(p, n) })
}

/// The NUL-terminated UTF-8 string at `p`.
pub(crate) fn string<'a>(p: *const c_char, arg: &str) -> Result<&'a str> {
    crate::ensure!(!p.is_null(), "{arg} is NULL");
    // SAFETY: non-NULL, and the caller's contract is a NUL-terminated string valid for the call.
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str().map_err(|_| crate::Error::new(format!("{arg} is not valid UTF-8")))
}

/// The `n` strings of the array at `p`.
pub(crate) fn strings<'a>(p: *const *const c_char, n: usize, arg: &str) -> Result<Vec<&'a str>> {
    slice(p, n, arg)?
        .iter()
        .enumerate()
        .map(|(i, s)| string(*s, &format!("{arg}[{i}]")))
        .collect()
}

/// A `u32` count as a length.
pub(crate) fn len(n: u32) -> usize {
    n as usize
}
