//! The objects of MXNet's profiling API that programs create themselves
//! (`MXProfileCreateDomain/Task/Frame/Event/Counter`, `MXProfileSetMarker`): their events
//! land in the same trace as libkvstore's own, under the domain's name.

use super::record::{now_us, thread, Kind, Record};
use crate::error::Result;
use parking_lot::Mutex;
use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A named group of tasks, frames, counters and markers: the trace's category.
#[derive(Debug)]
pub struct Domain {
    pub(crate) name: String,
}

impl Domain {
    pub fn new(name: &str) -> Arc<Domain> {
        Arc::new(Domain { name: name.to_string() })
    }
}

/// How a duration object is written: a task may start and stop on different threads (an
/// async `b`/`e` pair, as MXNet writes tasks); frames and events are `B`/`E` spans.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DurationKind {
    Task,
    Frame,
    Event,
}

/// A task, frame or event: started and stopped by the program, one span per start/stop.
#[derive(Debug)]
pub struct Duration {
    kind: DurationKind,
    name: String,
    cat: String,
    id: u64,
    /// Start time and thread of the running span.
    started: Mutex<Option<(f64, u32)>>,
}

impl Duration {
    /// `domain` is required for tasks and frames; the categories are MXNet's: the domain's
    /// name for tasks, "<domain>,frame" for frames, "event" for events.
    pub fn new(kind: DurationKind, name: &str, domain: Option<&Domain>) -> Arc<Duration> {
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        let cat = match (kind, domain) {
            (DurationKind::Frame, Some(d)) => format!("{},frame", d.name),
            (_, Some(d)) => d.name.clone(),
            (_, None) => "event".to_string(),
        };
        Arc::new(Duration { kind, name: name.to_string(), cat, id: NEXT_ID.fetch_add(1, Ordering::Relaxed), started: Mutex::new(None) })
    }

    pub fn kind(&self) -> DurationKind {
        self.kind
    }

    /// Starts a span (a second start restarts it).
    pub fn start(&self) {
        *self.started.lock() = Some((now_us(), thread()));
    }

    /// Ends the running span and records it while the profiler runs.
    pub fn stop(&self) -> Result<()> {
        let end = now_us();
        let Some((start, tid)) = self.started.lock().take() else {
            crate::bail!("'{}' was not started", self.name);
        };
        if super::user_enabled() {
            let kind = match self.kind {
                DurationKind::Task => Kind::Task { start, end, id: self.id },
                DurationKind::Frame | DurationKind::Event => Kind::Duration { start, end },
            };
            super::push(Record { name: Cow::Owned(self.name.clone()), cat: Cow::Owned(self.cat.clone()), kind, tid, args: Vec::new() });
        }
        Ok(())
    }
}

/// A value tracked over time (`C` events).
#[derive(Debug)]
pub struct Counter {
    name: String,
    cat: String,
    value: Mutex<u64>,
}

impl Counter {
    pub fn new(domain: &Domain, name: &str) -> Arc<Counter> {
        Arc::new(Counter { name: name.to_string(), cat: domain.name.clone(), value: Mutex::new(0) })
    }

    pub fn set(&self, value: u64) {
        let mut v = self.value.lock();
        *v = value;
        self.record(value);
    }

    /// Adds `by` (negative: subtracts). A result below 0 or above u64::MAX is refused and
    /// the value kept (MXNet wraps around).
    pub fn adjust(&self, by: i64) -> Result<()> {
        let mut v = self.value.lock();
        let Some(new) = v.checked_add_signed(by) else {
            crate::bail!("counter '{}' is {}: adding {by} leaves the range 0..=2^64-1", self.name, *v);
        };
        *v = new;
        self.record(new);
        Ok(())
    }

    pub fn value(&self) -> u64 {
        *self.value.lock()
    }

    fn record(&self, value: u64) {
        if super::user_enabled() {
            let kind = Kind::Counter { at: now_us(), value };
            super::push(Record { name: Cow::Owned(self.name.clone()), cat: Cow::Owned(self.cat.clone()), kind, tid: thread(), args: Vec::new() });
        }
    }
}

/// An instant marker. `scope` is MXNet's: global, process, thread, task or marker (the last
/// two are drawn process-wide, as MXNet does).
pub fn mark(domain: &Domain, name: &str, scope: &str) -> Result<()> {
    let scope = match scope {
        "global" => 'g',
        "process" | "task" | "marker" => 'p',
        "thread" => 't',
        _ => crate::bail!("invalid marker scope '{scope}': expected global, process, thread, task or marker"),
    };
    if super::user_enabled() {
        let kind = Kind::Instant { at: now_us(), scope };
        let cat = Cow::Owned(format!("{},instant_marker", domain.name));
        super::push(Record { name: Cow::Owned(name.to_string()), cat, kind, tid: thread(), args: Vec::new() });
    }
    Ok(())
}

/// What a `ProfileHandle` refers to.
#[derive(Debug, Clone)]
pub enum Handle {
    Domain(Arc<Domain>),
    Duration(Arc<Duration>),
    Counter(Arc<Counter>),
}
