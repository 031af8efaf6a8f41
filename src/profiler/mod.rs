//! The profiler: MXNet 1.9's profiler model (configure, run/stop, pause, dump a Chrome trace,
//! aggregate statistics) for libkvstore's own work, plus the objects of MXNet's profiling API.
//!
//! A low floor: the store and the engine's ops call down into it at a few points
//! ([`span`], [`traced`]). Off — the default — each point costs one relaxed atomic load and a
//! branch; nothing is allocated, timed or locked. On, a finished span takes the time twice
//! and appends one record under a lock; the trace is written by [`dump`].

mod aggregate;
mod config;
pub mod objects;
mod record;
mod trace;

pub use record::{Arg, Args};

use crate::engine::OpEnv;
use crate::error::Result;
use aggregate::{Aggregate, SortBy};
use config::{Config, Process};
use once_cell::sync::Lazy;
use parking_lot::Mutex;
pub use record::now_us;
use record::{thread, Kind, Record};
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU8, Ordering};

/// What is recorded right now, as bits: nothing unless the profiler runs and is not paused.
static ACTIVE: AtomicU8 = AtomicU8::new(0);
const CALLS: u8 = 1;
const OPS: u8 = 2;
const USER: u8 = 4;

/// Whether anything is being recorded: the cheap check in front of every hook.
#[inline]
pub fn enabled() -> bool {
    ACTIVE.load(Ordering::Relaxed) != 0
}

fn active(bit: u8) -> bool {
    ACTIVE.load(Ordering::Relaxed) & bit != 0
}

fn user_enabled() -> bool {
    active(USER)
}

/// Which kind of work an event is; each kind is one category (a process in the trace).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// A call at the store's entry (push, pull, ...) or an updater call, on the caller's
    /// thread: category "kvstore" (MXNet's `profile_api`).
    Call,
    /// An engine op (a batch of sums, copies, compressed sums), where it runs: category
    /// "engine" (MXNet's `profile_imperative`/`profile_symbolic`: operators).
    Op,
}

impl Class {
    fn bit(self) -> u8 {
        match self {
            Class::Call => CALLS,
            Class::Op => OPS,
        }
    }

    fn category(self) -> &'static str {
        match self {
            Class::Call => "kvstore",
            Class::Op => "engine",
        }
    }
}

/// A running span, recorded when dropped; inert when the profiler was off at its start.
#[must_use = "a span records when it is dropped"]
pub struct Span(Option<Box<Open>>);

struct Open {
    class: Class,
    name: &'static str,
    start: f64,
    tid: u32,
    args: Args,
}

/// Starts a span named `name`; `args` (key, bytes, context, ...) is evaluated only when the
/// profiler records `class`.
#[inline]
pub fn span(class: Class, name: &'static str, args: impl FnOnce() -> Args) -> Span {
    if !enabled() {
        return Span(None);
    }
    open(class, name, args)
}

#[cold]
fn open(class: Class, name: &'static str, args: impl FnOnce() -> Args) -> Span {
    if !active(class.bit()) {
        return Span(None);
    }
    let args = args();
    Span(Some(Box::new(Open { class, name, start: now_us(), tid: thread(), args })))
}

impl Drop for Span {
    #[inline]
    fn drop(&mut self) {
        if let Some(o) = self.0.take() {
            close(*o);
        }
    }
}

#[cold]
fn close(o: Open) {
    let kind = Kind::Duration { start: o.start, end: now_us() };
    push(Record { name: Cow::Borrowed(o.name), cat: Cow::Borrowed(o.class.category()), kind, tid: o.tid, args: o.args });
}

/// Wraps an engine op's `work` so that it runs inside an [`Class::Op`] span named `name`.
/// `args` is evaluated now (where the op is scheduled), and only when ops are recorded.
#[inline]
pub fn traced<W>(name: &'static str, args: impl FnOnce() -> Args, work: W) -> impl FnOnce(&OpEnv) -> Result<()> + Send + 'static
where
    W: FnOnce(&OpEnv) -> Result<()> + Send + 'static,
{
    let args = if active(OPS) { Some(args()) } else { None };
    move |env| {
        let _span = args.map(|args| Span(Some(Box::new(Open { class: Class::Op, name, start: now_us(), tid: thread(), args }))));
        work(env)
    }
}

/// Whether GPU work is recorded: while engine ops are (`profile_imperative`,
/// `profile_symbolic`, `profile_all`), running and not paused. The check in front of every
/// GPU enqueue: one relaxed atomic load and a branch.
#[inline]
pub fn gpu_enabled() -> bool {
    active(OPS)
}

/// The trace row (`tid`) named `name`, for work that does not run on a host thread (a GPU
/// stream): the same number for the same name, a fresh one the first time.
pub fn row(name: &str) -> u32 {
    static ROWS: Lazy<Mutex<BTreeMap<String, u32>>> = Lazy::new(|| Mutex::new(BTreeMap::new()));
    let mut rows = ROWS.lock();
    if let Some(&tid) = rows.get(name) {
        return tid;
    }
    let tid = record::next_tid();
    rows.insert(name.to_string(), tid);
    name_thread(tid, name.to_string());
    tid
}

/// Records work measured elsewhere than on a host thread (GPU work, timed by GPU events):
/// `name` ran from `start` to `end` (µs, the profiler's clock, see [`now_us`]) on `row` (see
/// [`row`]), in `category` (one process of the trace, e.g. a device's `gpu/0`). Recorded
/// whatever the profiler's state now: the caller checked [`gpu_enabled`] when the work began.
pub fn record_span(category: String, row: u32, name: String, start: f64, end: f64, args: Args) {
    push(Record { name: Cow::Owned(name), cat: Cow::Owned(category), kind: Kind::Duration { start, end }, tid: row, args });
}

/// The profiler's state (the records live apart, so recording does not wait on a dump).
#[derive(Default)]
struct State {
    config: Option<Config>,
    running: bool,
    paused: bool,
    /// Set by running; a dump needs it, and a finishing dump clears it (as MXNet's).
    output: bool,
    aggregate: Option<Aggregate>,
    /// Records already added to `aggregate` (an aggregate print between dumps).
    folded: usize,
}

static STATE: Lazy<Mutex<State>> = Lazy::new(|| Mutex::new(State::default()));
static RECORDS: Lazy<Mutex<Vec<Record>>> = Lazy::new(|| Mutex::new(Vec::new()));
static THREAD_NAMES: Lazy<Mutex<BTreeMap<u32, String>>> = Lazy::new(|| Mutex::new(BTreeMap::new()));

fn push(r: Record) {
    RECORDS.lock().push(r);
}

fn name_thread(tid: u32, name: String) {
    THREAD_NAMES.lock().insert(tid, name);
}

fn publish(s: &State) {
    let bits = if s.running && !s.paused {
        let c = s.config.clone().unwrap_or_default();
        USER | if c.profile_api { CALLS } else { 0 } | if c.profile_ops { OPS } else { 0 }
    } else {
        0
    };
    ACTIVE.store(bits, Ordering::Relaxed);
}

fn worker_only(process: i32) -> Result<()> {
    match Process::from_int(process)? {
        Process::Worker => Ok(()),
        Process::Server => crate::bail!("profiling a server process needs a distributed store, which libkvstore does not have yet"),
    }
}

/// `MXSetProcessProfilerConfig`: checks every key first, then applies them all. A new
/// configuration drops what was recorded and not yet dumped.
pub fn configure(pairs: &[(&str, &str)]) -> Result<()> {
    let (config, target) = config::parse(pairs)?;
    crate::ensure!(target == Process::Worker, "profile_process 'server' needs a distributed store, which libkvstore does not have yet");
    let mut s = STATE.lock();
    s.aggregate = config.aggregate_stats.then(|| s.aggregate.take().unwrap_or_default());
    s.config = Some(config);
    RECORDS.lock().clear();
    s.folded = 0;
    publish(&s);
    Ok(())
}

/// `MXSetProcessProfilerState`: 1 runs (and enables dumping), 0 stops.
pub fn set_state(state: i32, process: i32) -> Result<()> {
    worker_only(process)?;
    let mut s = STATE.lock();
    match state {
        0 => s.running = false,
        1 => {
            s.running = true;
            s.output = true;
            s.paused = false;
        }
        _ => crate::bail!("profiler state {state} is not 0 (stop) or 1 (run)"),
    }
    publish(&s);
    Ok(())
}

/// `MXProcessProfilePause`: non-zero pauses recording, 0 resumes it.
pub fn pause(paused: bool, process: i32) -> Result<()> {
    worker_only(process)?;
    let mut s = STATE.lock();
    s.paused = paused;
    publish(&s);
    Ok(())
}

/// `MXDumpProcessProfile`: writes everything recorded since the last dump as one complete
/// trace file; `finished` ends output until the profiler runs again.
pub fn dump(finished: bool, process: i32) -> Result<()> {
    worker_only(process)?;
    let mut s = STATE.lock();
    crate::ensure!(s.output, "the profiler has not been run: configure it (MXSetProfilerConfig) and start it (MXSetProfilerState 1) first");
    let filename = s.config.as_ref().map_or_else(|| Config::default().filename, |c| c.filename.clone());
    let records = std::mem::take(&mut *RECORDS.lock());
    let json = trace::write(&records, &THREAD_NAMES.lock());
    if let Err(e) = std::fs::write(&filename, json) {
        // Keep the records for a retry with another filename.
        let mut pending = RECORDS.lock();
        let newer = std::mem::replace(&mut *pending, records);
        pending.extend(newer);
        crate::bail!("cannot write the profile to '{filename}': {e}");
    }
    let folded = std::mem::take(&mut s.folded);
    if let Some(a) = s.aggregate.as_mut() {
        records[folded.min(records.len())..].iter().for_each(|r| a.add(r));
    }
    if finished {
        s.output = false;
    }
    Ok(())
}

/// `MXAggregateProfileStatsPrintEx`: the aggregate statistics so far as MXNet's table
/// (`format` 0) or JSON (1), rows sorted by `sort_by`; `reset` clears them afterwards. Empty
/// when `aggregate_stats` is off, as in MXNet.
pub fn aggregate_stats(reset: bool, format: i32, sort_by: i32, ascending: bool) -> Result<String> {
    crate::ensure!(format == 0 || format == 1, "format {format} is not 0 (table) or 1 (json)");
    let sort_by = SortBy::from_int(sort_by)?;
    let mut s = STATE.lock();
    let folded = s.folded;
    let Some(a) = s.aggregate.as_mut() else { return Ok(String::new()) };
    let records = RECORDS.lock();
    records[folded.min(records.len())..].iter().for_each(|r| a.add(r));
    let text = if format == 0 { a.table(sort_by, ascending) } else { a.json(sort_by, ascending) };
    if reset {
        a.clear();
    }
    s.folded = records.len();
    Ok(text)
}

#[cfg(test)]
mod tests;
