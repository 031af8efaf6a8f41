//! Panics inside an export are caught by the boundary and become -1 with the panic's message
//! in `MXGetLastError()`; the standard hook would also print them on the caller's stderr.
//! While a thread runs inside an export, this hook prints nothing and keeps the panic's
//! location for the message; elsewhere (engine workers, a host program's own Rust code
//! when libkvstore is linked as an rlib) it defers to the hook it replaced.

use std::cell::{Cell, RefCell};
use std::io::Write;
use std::panic::PanicHookInfo;
use std::sync::Once;

const LOCATION_BYTES: usize = 160;

thread_local! {
    // No destructors (plain arrays and counters): usable from thread-exit destructors and
    // atexit handlers, after the thread's other thread-locals are gone.
    static DEPTH: Cell<u32> = const { Cell::new(0) };
    static LOCATION: RefCell<(usize, [u8; LOCATION_BYTES])> = const { RefCell::new((0, [0; LOCATION_BYTES])) };
}

static INSTALL: Once = Once::new();

fn install() {
    INSTALL.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info: &PanicHookInfo<'_>| {
            if DEPTH.try_with(Cell::get).unwrap_or(0) > 0 {
                record_location(info);
            } else {
                previous(info);
            }
        }));
    });
}

fn record_location(info: &PanicHookInfo<'_>) {
    let _ = LOCATION.try_with(|l| {
        if let Ok(mut l) = l.try_borrow_mut() {
            let (len, buf) = &mut *l;
            let mut rest = &mut buf[..];
            if let Some(at) = info.location() {
                let _ = write!(rest, "{}:{}", at.file(), at.line());
            }
            *len = LOCATION_BYTES - rest.len();
        }
    });
}

/// Where the last panic inside an export on this thread happened (`file:line`), once.
pub(crate) fn take_location() -> Option<String> {
    LOCATION
        .try_with(|l| {
            let mut l = l.try_borrow_mut().ok()?;
            let (len, buf) = &mut *l;
            let text = (*len > 0).then(|| String::from_utf8_lossy(&buf[..*len]).into_owned());
            *len = 0;
            text
        })
        .ok()
        .flatten()
}

/// Marks this thread as inside an export while `body` runs.
pub(crate) fn inside<R>(body: impl FnOnce() -> R) -> R {
    install();
    struct Leave;
    impl Drop for Leave {
        fn drop(&mut self) {
            let _ = DEPTH.try_with(|d| d.set(d.get().saturating_sub(1)));
        }
    }
    let _ = DEPTH.try_with(|d| d.set(d.get() + 1));
    let _leave = Leave;
    body()
}
