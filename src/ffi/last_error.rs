//! The thread-local last error behind `MXGetLastError()`: set by a failing call, kept until
//! the next failure on the same thread (success does not clear it, as in MXNet).

use std::cell::RefCell;
use std::ffi::CString;
use std::os::raw::c_char;

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// Records `message` as the error of call `name`. Never panics.
#[cold]
pub(crate) fn set(name: &str, message: &str) {
    // "MXNetError: " first: MXNet's Python maps the text before the first colon to an
    // exception class, and MXNetError is what its tests expect from the store.
    let text = format!("MXNetError: {name}: {message}").replace('\0', " ");
    let text = CString::new(text).unwrap_or_default();
    let _ = LAST_ERROR.try_with(|e| {
        if let Ok(mut e) = e.try_borrow_mut() {
            *e = text;
        }
    });
}

/// The last error of this thread, valid until the next failing call on this thread.
pub(crate) fn as_ptr() -> *const c_char {
    LAST_ERROR
        .try_with(|e| e.try_borrow().map(|e| e.as_ptr()).unwrap_or(c"".as_ptr()))
        .unwrap_or(c"".as_ptr())
}

#[cfg(test)]
pub(crate) fn get_for_test() -> String {
    LAST_ERROR.with(|e| e.borrow().to_string_lossy().into_owned())
}
