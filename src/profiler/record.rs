//! What the profiler records: one [`Record`] per finished span, counter value or marker, with
//! the time, the thread and the arguments a trace viewer shows.

use once_cell::sync::Lazy;
use std::borrow::Cow;
use std::cell::Cell;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Microseconds since the Unix epoch (as MXNet's timestamps), read from a monotonic clock
/// anchored once, with nanosecond resolution: spans of a few microseconds keep their order.
pub fn now_us() -> f64 {
    static ANCHOR: Lazy<(Instant, f64)> = Lazy::new(|| {
        let wall = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64() * 1e6).unwrap_or(0.0);
        (Instant::now(), wall.floor())
    });
    ANCHOR.1 + ANCHOR.0.elapsed().as_nanos() as f64 / 1e3
}

/// A fresh small number for a trace row (`tid`): threads' and GPU streams' rows share them.
pub(crate) fn next_tid() -> u32 {
    static NEXT: AtomicU32 = AtomicU32::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// A small per-thread number for the trace's `tid`, and the thread's name the first time.
pub(crate) fn thread() -> u32 {
    thread_local!(static ID: Cell<u32> = const { Cell::new(0) });
    ID.with(|id| {
        if id.get() == 0 {
            let n = next_tid();
            id.set(n);
            let name = std::thread::current().name().map_or_else(|| format!("caller thread {n}"), str::to_string);
            super::name_thread(n, name);
        }
        id.get()
    })
}

/// An argument shown with an event.
#[derive(Debug, Clone, PartialEq)]
pub enum Arg {
    Int(i64),
    Text(String),
}

/// The named arguments of an event (key, bytes, context, ...).
pub type Args = Vec<(&'static str, Arg)>;

/// What kind of trace event a record is.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Kind {
    /// A span on one thread: written as a `B`/`E` pair.
    Duration { start: f64, end: f64 },
    /// A span that may cross threads (a user task): written as an async `b`/`e` pair.
    Task { start: f64, end: f64, id: u64 },
    /// A counter's new value: `C`.
    Counter { at: f64, value: u64 },
    /// An instant marker: `i` with scope `g`, `p` or `t`.
    Instant { at: f64, scope: char },
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Record {
    pub name: Cow<'static, str>,
    /// The category; each category is one process (`pid`) in the trace, as in MXNet's.
    pub cat: Cow<'static, str>,
    pub kind: Kind,
    pub tid: u32,
    pub args: Args,
}
