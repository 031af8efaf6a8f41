//! MXNet 1.9's profiler C API: configuration, run/stop/pause, the Chrome trace dump, the
//! aggregate statistics, and the domain/task/frame/event/counter/marker objects. Each export
//! checks its arguments and delegates to `crate::profiler`. The `Process` variants take
//! `profile_process` 0 (worker); 1 (server) needs a distributed store and answers -1.

#![allow(non_snake_case)]

use super::args::{self, Out};
use super::handle;
use super::types::{KVStoreHandle, ProfileHandle};
use crate::error::Result;
use crate::profiler::objects::{self, Duration, DurationKind, Handle};
use crate::profiler::{self as profiler};
use std::cell::RefCell;
use std::ffi::CString;
use std::os::raw::{c_char, c_int};

thread_local! {
    // MXNet returns the statistics in a thread-local string the next call overwrites.
    static STATS: RefCell<CString> = RefCell::new(CString::default());
}

fn config_pairs<'a>(num_params: c_int, keys: *const *const c_char, vals: *const *const c_char) -> Result<Vec<(&'a str, &'a str)>> {
    let n = usize::try_from(num_params).map_err(|_| crate::Error::new(format!("num_params {num_params} is negative")))?;
    let keys = args::strings(keys, n, "keys")?;
    let vals = args::strings(vals, n, "vals")?;
    Ok(keys.into_iter().zip(vals).collect())
}

/// Configures the profiler with MXNet's keys: `filename` (default profile.json), `profile_all`,
/// `profile_api` (store calls), `profile_imperative`/`profile_symbolic` (engine ops),
/// `profile_memory`, `aggregate_stats`, `continuous_dump`, `dump_period`, `profile_process`.
/// An unknown key or a bad value answers -1 and changes nothing.
///
/// Ownership: `keys` and `vals` are read during the call only.
pub extern "C" fn MXSetProfilerConfig(num_params: c_int, keys: *const *const c_char, vals: *const *const c_char) -> c_int {
    ffi_boundary!({ profiler::configure(&config_pairs(num_params, keys, vals)?) })
}

/// [`MXSetProfilerConfig`] for a process. `kvstoreHandle` would only reach servers, which
/// need a distributed store (`profile_process` = "server" answers -1), so it is not read:
/// MXNet's Python frontend passes the last store it created, possibly freed since.
///
/// Ownership: `keys` and `vals` are read during the call only.
pub extern "C" fn MXSetProcessProfilerConfig(
    num_params: c_int,
    keys: *const *const c_char,
    vals: *const *const c_char,
    kvstoreHandle: KVStoreHandle,
) -> c_int {
    ffi_boundary!({
        let _ = kvstoreHandle;
        profiler::configure(&config_pairs(num_params, keys, vals)?)
    })
}

/// Starts (1) or stops (0) recording. Starting enables [`MXDumpProfile`].
pub extern "C" fn MXSetProfilerState(state: c_int) -> c_int {
    ffi_boundary!({ profiler::set_state(state, 0) })
}

/// [`MXSetProfilerState`] for `profile_process` 0 (worker); 1 (server) answers -1.
pub extern "C" fn MXSetProcessProfilerState(state: c_int, profile_process: c_int, kvStoreHandle: KVStoreHandle) -> c_int {
    ffi_boundary!({
        let _ = kvStoreHandle;
        profiler::set_state(state, profile_process)
    })
}

/// Writes what was recorded since the last dump to the configured file as a Chrome trace
/// (chrome://tracing, Perfetto). `finished` non-zero ends output until the next run. Before
/// the profiler has run: -1.
pub extern "C" fn MXDumpProfile(finished: c_int) -> c_int {
    ffi_boundary!({ profiler::dump(finished != 0, 0) })
}

/// [`MXDumpProfile`] for `profile_process` 0 (worker); 1 (server) answers -1.
pub extern "C" fn MXDumpProcessProfile(finished: c_int, profile_process: c_int, kvStoreHandle: KVStoreHandle) -> c_int {
    ffi_boundary!({
        let _ = kvStoreHandle;
        profiler::dump(finished != 0, profile_process)
    })
}

/// The aggregate statistics as MXNet's table; see [`MXAggregateProfileStatsPrintEx`].
///
/// Ownership: `*out_str` is borrowed, valid until the next such call on this thread.
pub extern "C" fn MXAggregateProfileStatsPrint(out_str: *mut *const c_char, reset: c_int) -> c_int {
    ffi_boundary!({ stats(out_str, reset, 0, 0, 0) })
}

/// The aggregate statistics (`aggregate_stats`): per category and event name, count and
/// total/min/max/average milliseconds; `format` 0 table, 1 JSON; `sort_by` 0 total, 1 avg,
/// 2 min, 3 max, 4 count; `reset` non-zero clears them. Empty when `aggregate_stats` is off.
///
/// Ownership: `*out_str` is borrowed, valid until the next such call on this thread.
pub extern "C" fn MXAggregateProfileStatsPrintEx(
    out_str: *mut *const c_char,
    reset: c_int,
    format: c_int,
    sort_by: c_int,
    ascending: c_int,
) -> c_int {
    ffi_boundary!({ stats(out_str, reset, format, sort_by, ascending) })
}

fn stats(out_str: *mut *const c_char, reset: c_int, format: c_int, sort_by: c_int, ascending: c_int) -> Result<()> {
    let out = Out::new(out_str, "out_str")?;
    let text = profiler::aggregate_stats(reset != 0, format, sort_by, ascending != 0)?;
    let text = CString::new(text.replace('\0', " ")).unwrap_or_default();
    STATS.with(|s| {
        *s.borrow_mut() = text;
        out.write(s.borrow().as_ptr());
    });
    Ok(())
}

/// Pauses (non-zero) or resumes (0) recording while the profiler runs.
pub extern "C" fn MXProfilePause(paused: c_int) -> c_int {
    ffi_boundary!({ profiler::pause(paused != 0, 0) })
}

/// [`MXProfilePause`] for `profile_process` 0 (worker); 1 (server) answers -1.
pub extern "C" fn MXProcessProfilePause(paused: c_int, profile_process: c_int, kvStoreHandle: KVStoreHandle) -> c_int {
    ffi_boundary!({
        let _ = kvStoreHandle;
        profiler::pause(paused != 0, profile_process)
    })
}

fn domain(h: ProfileHandle) -> Result<std::sync::Arc<objects::Domain>> {
    match handle::profile(h, "domain")? {
        Handle::Domain(d) => Ok(d),
        _ => crate::bail!("domain ({h:p}) is not a profiling domain (made by MXProfileCreateDomain)"),
    }
}

/// A new domain: the category its tasks, frames, counters and markers appear under.
///
/// Ownership: `*out` is a new handle (free with MXProfileDestroyHandle).
pub extern "C" fn MXProfileCreateDomain(domain: *const c_char, out: *mut ProfileHandle) -> c_int {
    ffi_boundary!({
        let out = Out::new(out, "out")?;
        let name = args::string(domain, "domain")?;
        out.write(handle::new_profile(Handle::Domain(objects::Domain::new(name))));
        Ok(())
    })
}

fn create_duration(kind: DurationKind, dom: ProfileHandle, name: *const c_char, arg: &str, out: *mut ProfileHandle) -> Result<()> {
    let out = Out::new(out, "out")?;
    let d = if kind == DurationKind::Event { None } else { Some(domain(dom)?) };
    let name = args::string(name, arg)?;
    out.write(handle::new_profile(Handle::Duration(Duration::new(kind, name, d.as_deref()))));
    Ok(())
}

/// A new task of `domain`: a span that may start and stop on different threads.
///
/// Ownership: `*out` is a new handle (free with MXProfileDestroyHandle).
pub extern "C" fn MXProfileCreateTask(domain: ProfileHandle, task_name: *const c_char, out: *mut ProfileHandle) -> c_int {
    ffi_boundary!({ create_duration(DurationKind::Task, domain, task_name, "task_name", out) })
}

/// A new frame of `domain`: a span on one thread.
///
/// Ownership: `*out` is a new handle (free with MXProfileDestroyHandle).
pub extern "C" fn MXProfileCreateFrame(domain: ProfileHandle, frame_name: *const c_char, out: *mut ProfileHandle) -> c_int {
    ffi_boundary!({ create_duration(DurationKind::Frame, domain, frame_name, "frame_name", out) })
}

/// A new event (category "event"): a span on one thread.
///
/// Ownership: `*out` is a new handle (free with MXProfileDestroyHandle).
pub extern "C" fn MXProfileCreateEvent(event_name: *const c_char, out: *mut ProfileHandle) -> c_int {
    ffi_boundary!({ create_duration(DurationKind::Event, std::ptr::null_mut(), event_name, "event_name", out) })
}

/// A new counter of `domain`, starting at 0.
///
/// Ownership: `*out` is a new handle (free with MXProfileDestroyHandle).
pub extern "C" fn MXProfileCreateCounter(domain: ProfileHandle, counter_name: *const c_char, out: *mut ProfileHandle) -> c_int {
    ffi_boundary!({
        let out = Out::new(out, "out")?;
        let d = self::domain(domain)?;
        let name = args::string(counter_name, "counter_name")?;
        out.write(handle::new_profile(Handle::Counter(objects::Counter::new(&d, name))));
        Ok(())
    })
}

/// Frees a task, frame, event, counter or domain handle (recorded events stay).
pub extern "C" fn MXProfileDestroyHandle(frame_handle: ProfileHandle) -> c_int {
    ffi_boundary!({ handle::free_profile(frame_handle, "frame_handle") })
}

fn duration(h: ProfileHandle) -> Result<std::sync::Arc<Duration>> {
    match handle::profile(h, "duration_handle")? {
        Handle::Duration(d) => Ok(d),
        _ => crate::bail!("duration_handle ({h:p}) is not a task, frame or event"),
    }
}

/// Starts a task, frame or event.
pub extern "C" fn MXProfileDurationStart(duration_handle: ProfileHandle) -> c_int {
    ffi_boundary!({
        duration(duration_handle)?.start();
        Ok(())
    })
}

/// Stops a started task, frame or event, recording its span while the profiler runs; -1 if
/// it was not started.
pub extern "C" fn MXProfileDurationStop(duration_handle: ProfileHandle) -> c_int {
    ffi_boundary!({ duration(duration_handle)?.stop() })
}

fn counter(h: ProfileHandle) -> Result<std::sync::Arc<objects::Counter>> {
    match handle::profile(h, "counter_handle")? {
        Handle::Counter(c) => Ok(c),
        _ => crate::bail!("counter_handle ({h:p}) is not a counter (made by MXProfileCreateCounter)"),
    }
}

/// Sets a counter.
pub extern "C" fn MXProfileSetCounter(counter_handle: ProfileHandle, value: u64) -> c_int {
    ffi_boundary!({
        counter(counter_handle)?.set(value);
        Ok(())
    })
}

/// Adds `value` (may be negative) to a counter; a result below 0 answers -1 and keeps it.
pub extern "C" fn MXProfileAdjustCounter(counter_handle: ProfileHandle, value: i64) -> c_int {
    ffi_boundary!({ counter(counter_handle)?.adjust(value) })
}

/// Records an instant marker in `domain`; `scope` is "global", "process", "thread", "task"
/// or "marker".
pub extern "C" fn MXProfileSetMarker(domain: ProfileHandle, instant_marker_name: *const c_char, scope: *const c_char) -> c_int {
    ffi_boundary!({
        let d = self::domain(domain)?;
        let name = args::string(instant_marker_name, "instant_marker_name")?;
        let scope = args::string(scope, "scope")?;
        objects::mark(&d, name, scope)
    })
}
