//! The thread-local buffers some calls return pointers into (shapes, operator outputs), as
//! MXNet does. A thread's buffers are destroyed when it exits, before its pthread key
//! destructors run, and the main thread's when `exit()` starts, before the `atexit` handlers
//! run: a call made from there answers -1 with a clear message instead of panicking.

use crate::error::Result;
use std::cell::RefCell;
use std::thread::LocalKey;

/// A per-thread buffer of `T`s.
pub(crate) type Buffer<T> = LocalKey<RefCell<Vec<T>>>;

fn torn_down(what: &str) -> crate::Error {
    crate::Error::new(format!(
        "{what} cannot be returned: this thread's result buffers are already destroyed \
         (the call comes from a thread-exit destructor or an atexit handler)"
    ))
}

/// Fails now, before any work, if `buffer` can no longer be used on this thread.
pub(crate) fn check<T: 'static>(buffer: &'static Buffer<T>, what: &str) -> Result<()> {
    buffer.try_with(|_| ()).map_err(|_| torn_down(what))
}

/// Replaces this thread's `buffer` with `values`; returns a pointer to them, valid until the
/// next call that replaces it on this thread.
pub(crate) fn keep<T: 'static>(buffer: &'static Buffer<T>, values: Vec<T>, what: &str) -> Result<*mut T> {
    buffer
        .try_with(|b| {
            let mut b = b.borrow_mut();
            *b = values;
            b.as_mut_ptr()
        })
        .map_err(|_| torn_down(what))
}
