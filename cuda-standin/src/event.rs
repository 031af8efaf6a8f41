//! Events: a point recorded in a stream, with the time the stream reached it.

use crate::handles::{next_handle, Table};
use crate::result::*;
use crate::stream::{Stream, Wait};
use crate::context::Context;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;
use std::time::Instant;

pub const DISABLE_TIMING: u32 = 0x2;

struct Record {
    point: Wait,
    reached: Arc<Mutex<Option<Instant>>>,
    sticky: Arc<AtomicI32>,
}

pub struct Event {
    pub handle: u64,
    flags: u32,
    record: Mutex<Option<Arc<Record>>>,
}

static EVENTS: Table<Event> = Table::new();

impl Event {
    pub fn create(flags: u32) -> Arc<Event> {
        let event = Arc::new(Event { handle: next_handle(), flags, record: Mutex::new(None) });
        EVENTS.insert(event.handle, event.clone());
        event
    }

    pub fn lookup(handle: u64) -> Result<Arc<Event>, CUresult> {
        EVENTS.get(handle).ok_or(INVALID_HANDLE)
    }

    /// Forgets the handle. Streams waiting on it hold the recorded point itself, so their
    /// wait is unaffected.
    pub fn destroy(handle: u64) -> Result<(), CUresult> {
        EVENTS.remove(handle).map(|_| ()).ok_or(INVALID_HANDLE)
    }

    /// cuEventRecord: the event now stands for everything enqueued on `stream` so far.
    pub fn record(&self, stream: &Stream, context: &Context) {
        let reached = Arc::new(Mutex::new(None));
        let stamp = reached.clone();
        let point = stream.enqueue(
            context,
            Vec::new(),
            false,
            Box::new(move || {
                *stamp.lock() = Some(Instant::now());
                Ok(())
            }),
        );
        *self.record.lock() = Some(Arc::new(Record { point, reached, sticky: context.sticky.clone() }));
    }

    fn current(&self) -> Option<Arc<Record>> {
        self.record.lock().clone()
    }

    /// The point a stream waiting on this event waits for (None: never recorded, no wait).
    pub fn point(&self) -> Option<Wait> {
        self.current().map(|r| r.point.clone())
    }

    fn error_of(record: &Record) -> Result<(), CUresult> {
        match record.sticky.load(Ordering::Acquire) {
            0 => Ok(()),
            code => Err(code),
        }
    }

    pub fn query(&self) -> Result<(), CUresult> {
        let Some(record) = self.current() else { return Ok(()) };
        if !record.point.is_done() {
            return Err(NOT_READY);
        }
        Event::error_of(&record)
    }

    pub fn synchronize(&self) -> Result<(), CUresult> {
        let Some(record) = self.current() else { return Ok(()) };
        record.point.block();
        Event::error_of(&record)
    }

    /// Milliseconds from `start` to `end`; both must be recorded, completed and timed.
    pub fn elapsed_ms(start: &Event, end: &Event) -> Result<f32, CUresult> {
        if (start.flags | end.flags) & DISABLE_TIMING != 0 {
            return Err(INVALID_HANDLE);
        }
        let (Some(a), Some(b)) = (start.current(), end.current()) else { return Err(INVALID_HANDLE) };
        if !a.point.is_done() || !b.point.is_done() {
            return Err(NOT_READY);
        }
        Event::error_of(&a)?;
        Event::error_of(&b)?;
        let (Some(t0), Some(t1)) = (*a.reached.lock(), *b.reached.lock()) else { return Err(INVALID_HANDLE) };
        Ok(if t1 >= t0 { (t1 - t0).as_secs_f32() * 1e3 } else { -((t0 - t1).as_secs_f32() * 1e3) })
    }
}
