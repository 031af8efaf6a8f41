//! The thread-local last error behind `MXGetLastError()`: set by a failing call, kept until
//! the next failure on the same thread (success does not clear it, as in MXNet).
//!
//! The buffer is a fixed array with no destructor, so the thread-local is never destroyed: a
//! thread's thread-locals with destructors are gone before its pthread key destructors run
//! (and the main thread's before `atexit` handlers run), and calls made from there must still
//! set and read their message.

use std::cell::RefCell;
use std::os::raw::c_char;

/// Messages are cut to fit this many bytes with their NUL, so the buffer never moves: a
/// pointer a caller took earlier (C evaluates arguments in any order) still points at a
/// valid string.
const CAPACITY: usize = 4096;

thread_local! {
    static LAST_ERROR: RefCell<[u8; CAPACITY]> = const { RefCell::new([0; CAPACITY]) };
}

// No destructor: the thread-local lives as long as its thread.
const _: () = assert!(!std::mem::needs_drop::<RefCell<[u8; CAPACITY]>>());

/// Records `message` as the error of call `name`. Never panics.
#[cold]
pub(crate) fn set(name: &str, message: &str) {
    // "MXNetError: " first: MXNet's Python maps the text before the first colon to an
    // exception class, and MXNetError is what its tests expect from the store.
    set_raw(&format!("MXNetError: {name}: {message}"));
}

static MIRROR: std::sync::OnceLock<fn(&str)> = std::sync::OnceLock::new();

/// Makes every later error also go to `mirror` (hosted mode: the host's last error, which the
/// forwarded `MXGetLastError` reads).
pub(crate) fn mirror_to(mirror: fn(&str)) {
    let _ = MIRROR.set(mirror);
}

/// Records `text` verbatim as the last error (`NNAPISetLastError`). Never panics.
#[cold]
pub(crate) fn set_raw(text: &str) {
    if let Some(mirror) = MIRROR.get() {
        mirror(text);
    }
    let mut bytes: Vec<u8> = text.bytes().map(|b| if b == 0 { b' ' } else { b }).collect();
    if bytes.len() >= CAPACITY {
        let mut cut = CAPACITY - 4;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        bytes.truncate(cut);
        bytes.extend_from_slice(b"...");
    }
    let _ = LAST_ERROR.try_with(|e| {
        if let Ok(mut e) = e.try_borrow_mut() {
            e[..bytes.len()].copy_from_slice(&bytes);
            e[bytes.len()] = 0;
        }
    });
}

/// The last error of this thread, valid until the next failing call on this thread.
pub(crate) fn as_ptr() -> *const c_char {
    LAST_ERROR
        .try_with(|e| e.try_borrow().map(|e| e.as_ptr() as *const c_char).unwrap_or(c"".as_ptr()))
        .unwrap_or(c"".as_ptr())
}

#[cfg(test)]
pub(crate) fn get_for_test() -> String {
    LAST_ERROR.with(|e| String::from_utf8_lossy(e.borrow().split(|&b| b == 0).next().unwrap_or(&[])).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_buffer_does_not_move_and_long_messages_are_cut() {
        let before = as_ptr();
        set("MXTest", &"x".repeat(10_000));
        assert_eq!(as_ptr(), before);
        let msg = get_for_test();
        assert!(msg.starts_with("MXNetError: MXTest: xxx") && msg.ends_with("...") && msg.len() < CAPACITY);
    }
}
