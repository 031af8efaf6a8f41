//! [`Engine::try_extend`] where a host's engine runs the ops (hosted mode). The host op of the
//! extended op was queued with its own dependencies, which cannot grow, and the host's own ops
//! on the new writes (the pull's outputs, host arrays) are invisible here. So two more host ops
//! are queued with the extension:
//!
//! - a *guard* writing the new writes: once the host starts it, every host op queued before on
//!   them is done and every later one waits for the guard, which completes only when they hold
//!   what the extension promised;
//! - a *reader* of the op's own writes (the stored value): it keeps them from being overwritten
//!   until that is so.
//!
//! When the extended op starts, it writes the new writes in its own pass if the guard has
//! started (the fused case). Otherwise it runs as scheduled, and the work it would have done
//! for them ([`Deferred`], from the caller's `detach`) runs once both the guard and the reader
//! have started. Nothing ever waits for the guard to start while holding what an earlier host
//! op needs: the guard waits only for host ops queued before it, and the op never waits for
//! the guard, so no cycle of waits can form.

use super::poison::Failure;
use super::{Engine, HostCompletion, Op};
use crate::error::{Error, Result};
use parking_lot::Mutex;
use std::sync::Arc;

/// The work an extension does for its new writes when the extended op ran without them.
pub type Deferred = Box<dyn FnOnce() -> Result<()> + Send>;

/// Takes back from the op what [`Engine::try_extend`]'s `attach` handed it, as [`Deferred`] work.
pub type Detach = Box<dyn FnOnce() -> Deferred + Send>;

/// One extension of an op running in a host's engine.
pub(super) struct HostExtension {
    state: Mutex<State>,
    /// The engine's ids of the new writes: where a failure of theirs is kept.
    writes: Vec<u64>,
}

struct State {
    guard: Side,
    reader: Side,
    op: Stage,
    detach: Option<Detach>,
}

/// Where one of the two host ops is.
enum Side {
    Queued,
    /// Started: completes the host op.
    Held(HostCompletion),
    /// Completed (or skipped by the host, or never queued).
    Gone,
}

/// Where the extended op is.
enum Stage {
    NotStarted,
    /// Started with the new writes in its pass.
    Fused,
    /// Started without them: their work, to run once guard and reader have started.
    Detached(Option<Deferred>),
    /// Finished; `failure` for the new writes (the op's own, or why they could not be written).
    Finished { failure: Option<String>, deferred: Option<Deferred> },
}

impl HostExtension {
    pub(super) fn new(writes: Vec<u64>, detach: Detach) -> Arc<HostExtension> {
        let state = State { guard: Side::Queued, reader: Side::Queued, op: Stage::NotStarted, detach: Some(detach) };
        Arc::new(HostExtension { state: Mutex::new(state), writes })
    }

    /// The extended op starts: with the new writes if the guard holds them.
    pub(super) fn op_starts(&self) {
        let mut s = self.state.lock();
        if let Stage::NotStarted = s.op {
            let detach = s.detach.take();
            s.op = match (&s.guard, detach) {
                (Side::Held(_), _) => Stage::Fused,
                (_, detach) => Stage::Detached(detach.map(|d| d())),
            };
        }
    }

    /// The extended op finished (or was skipped, never started: then its failure).
    pub(super) fn op_finished(&self, engine: &'static Engine, failure: Option<String>) {
        let mut s = self.state.lock();
        let (failure, deferred) = match std::mem::replace(&mut s.op, Stage::NotStarted) {
            Stage::Fused => (failure, None),
            Stage::Detached(deferred) => (failure.clone(), deferred.filter(|_| failure.is_none())),
            Stage::NotStarted => {
                s.detach = None;
                (Some(failure.unwrap_or_else(|| "the store's op ended before it started".into())), None)
            }
            done @ Stage::Finished { .. } => {
                s.op = done;
                return;
            }
        };
        s.op = Stage::Finished { failure, deferred };
        self.advance(engine, s);
    }

    /// The guard's host op started (`refusal`: the host side found the new writes' memory not
    /// as queued), or was dropped unstarted (`None`).
    pub(super) fn guard_started(&self, engine: &'static Engine, start: Option<(HostCompletion, Option<String>)>) {
        let mut s = self.state.lock();
        match start {
            Some((complete, None)) => s.guard = Side::Held(complete),
            Some((complete, Some(why))) => {
                // Not to be written: the op must not write them (what `attach` handed it is
                // taken back, unused), and they fail with the reason.
                if let Some(detach) = s.detach.take() {
                    drop(detach());
                }
                if let Stage::Detached(d) | Stage::Finished { deferred: d, .. } = &mut s.op {
                    *d = None;
                }
                engine.poison.record(&self.writes, &Failure::new(Error::new(why.clone())));
                complete(Some(why));
                s.guard = Side::Gone;
            }
            None => s.guard = Side::Gone,
        }
        self.advance(engine, s);
    }

    /// The reader's host op started, or was dropped unstarted (`None`).
    pub(super) fn reader_started(&self, engine: &'static Engine, complete: Option<HostCompletion>) {
        let mut s = self.state.lock();
        s.reader = complete.map_or(Side::Gone, Side::Held);
        self.advance(engine, s);
    }

    /// Completes what can be completed once the op has finished: the deferred work when guard
    /// and reader both hold their memory, then the guard (with the outcome) and the reader.
    fn advance(&self, engine: &'static Engine, mut s: parking_lot::MutexGuard<'_, State>) {
        let State { guard, reader, op, .. } = &mut *s;
        let Stage::Finished { failure, deferred } = op else { return };
        if deferred.is_some() {
            match (&*guard, &*reader) {
                (Side::Held(_), Side::Held(_)) => {
                    if let Some(work) = deferred.take() {
                        *failure = work().err().map(|e| e.message().to_string());
                    }
                }
                (Side::Queued, _) | (_, Side::Queued) => return,
                // The host skipped one of them (a failure kept on their memory): the outputs
                // are not written, and must not pass for written.
                _ => {
                    *deferred = None;
                    failure.get_or_insert_with(|| "the host's engine skipped the pull's copy after a failure on its arrays".into());
                }
            }
        }
        if let Some(why) = failure.as_ref() {
            engine.poison.record(&self.writes, &Failure::new(Error::new(why.clone())));
        }
        guard.complete(failure.clone());
        reader.complete(None);
    }
}

impl Side {
    /// Completes the host op if it is held (a queued one completes once it starts).
    fn complete(&mut self, failure: Option<String>) {
        if let Side::Held(_) = self {
            if let Side::Held(complete) = std::mem::replace(self, Side::Gone) {
                complete(failure);
            }
        }
    }
}

impl Engine {
    /// Queues the guard and the reader of an extension of `op` (hosted mode); `false`, nothing
    /// queued, where the host refused the guard. A reader the host refuses leaves the guard to
    /// complete as soon as it starts: the caller then treats the extension as refused.
    pub(super) fn queue_host_extension(
        &'static self,
        host: &'static dyn super::Scheduler,
        op: &Arc<Op>,
        writes: &[super::Var],
        ext: &Arc<HostExtension>,
    ) -> bool {
        let tokens = |vars: &[super::Var]| vars.iter().map(|v| v.token(host)).collect::<Result<Vec<usize>>>();
        let Ok(guarded) = tokens(writes) else { return false };
        let read = op.write_tokens.lock().clone();
        let g = Arc::clone(ext);
        let guard = Guarded { engine: self, ext: Some(g), reader: false };
        if host.push_prompt(&[], &guarded, op.priority, Box::new(move |complete, refusal| guard.start(complete, refusal))).is_err() {
            return false;
        }
        let r = Arc::clone(ext);
        let reader = Guarded { engine: self, ext: Some(r), reader: true };
        if host.push_prompt(&read, &[], op.priority, Box::new(move |complete, refusal| reader.start(complete, refusal))).is_err() {
            // The guard completes as it starts; the extension never reaches the op.
            let mut s = ext.state.lock();
            s.detach = None;
            s.op = Stage::Finished { failure: None, deferred: None };
            return false;
        }
        true
    }
}

/// The start of a guard or a reader in the host's engine; dropped unstarted, it tells its
/// extension so.
struct Guarded {
    engine: &'static Engine,
    ext: Option<Arc<HostExtension>>,
    reader: bool,
}

impl Guarded {
    fn start(mut self, complete: HostCompletion, refusal: Option<String>) {
        if let Some(ext) = self.ext.take() {
            match self.reader {
                true => ext.reader_started(self.engine, Some(complete)),
                false => ext.guard_started(self.engine, Some((complete, refusal))),
            }
        }
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        if let Some(ext) = self.ext.take() {
            match self.reader {
                true => ext.reader_started(self.engine, None),
                false => ext.guard_started(self.engine, None),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::RecordingHost;
    use super::super::{Engine, Var};
    use super::{Deferred, Detach};
    use parking_lot::Mutex;
    use std::sync::Arc;

    type Log = Arc<Mutex<Vec<String>>>;

    /// An op reading `src` and writing `dst`, extended to `out`: the op logs whether it wrote
    /// `out` in its own pass (what `attach` handed it and `detach` did not take back), and the
    /// deferred work logs its copy.
    fn extended(e: &'static Engine, src: Var, dst: Var, out: Var, log: &Log) -> bool {
        let handed = Arc::new(Mutex::new(false));
        let (h, l) = (Arc::clone(&handed), Arc::clone(log));
        let ticket = e
            .push_batch(&[src], &[dst], 0, false, true, move |_| {
                l.lock().push(format!("op ran, writing out: {}", *h.lock()));
                Ok(())
            })
            .unwrap();
        let (h, l) = (Arc::clone(&handed), Arc::clone(log));
        let detach: Detach = Box::new(move || -> Deferred {
            *h.lock() = false;
            Box::new(move || {
                l.lock().push("deferred copy".into());
                Ok(())
            })
        });
        e.try_extend(&ticket, &[out], move || *handed.lock() = true, detach)
    }

    #[test]
    fn the_op_writes_the_new_variables_itself_where_the_guard_started_first() {
        let host: &'static RecordingHost = Box::leak(Box::default());
        let e = Engine::start_on(host);
        let (src, dst, out, log) = (Var::new(), Var::new(), Var::new(), Log::default());
        assert!(extended(e, src, dst, out, &log));
        // Pushed: the op, the guard (writing out), the reader (reading dst).
        let tokens = |v: Var| e.host_token(v).unwrap().unwrap();
        assert_eq!(host.pushed.lock().len(), 3);
        assert_eq!(host.start_at(1, None), (vec![], vec![tokens(out)]), "the guard writes the new variable");
        assert!(host.completions.lock().is_empty(), "the guard holds out until the op has written it");
        host.start_at(0, None);
        assert_eq!(*log.lock(), vec!["op ran, writing out: true"]);
        assert_eq!(host.completions.lock().len(), 2, "the op's and the guard's host ops completed");
        assert_eq!(host.start_at(0, None), (vec![tokens(dst)], vec![]), "the reader reads what the op writes");
        assert_eq!(*host.completions.lock(), vec![None, None, None]);
        assert_eq!(*log.lock(), vec!["op ran, writing out: true"], "nothing deferred");
        e.wait_to_read(out).unwrap();
    }

    #[test]
    fn an_op_started_before_its_guard_leaves_the_new_variables_to_the_deferred_work() {
        for reader_first in [false, true] {
            let host: &'static RecordingHost = Box::leak(Box::default());
            let e = Engine::start_on(host);
            let (src, dst, out, log) = (Var::new(), Var::new(), Var::new(), Log::default());
            assert!(extended(e, src, dst, out, &log));
            host.start_at(0, None);
            assert_eq!(*log.lock(), vec!["op ran, writing out: false"], "detached before it ran");
            assert_eq!(host.completions.lock().len(), 1, "the op itself completes");
            // Guard and reader in either order: the copy runs once both hold their memory, and
            // then both complete.
            host.start_at(if reader_first { 1 } else { 0 }, None);
            assert_eq!(log.lock().len(), 1, "no copy before both have started");
            assert_eq!(host.completions.lock().len(), 1);
            host.start_at(0, None);
            assert_eq!(*log.lock(), vec!["op ran, writing out: false", "deferred copy"]);
            assert_eq!(*host.completions.lock(), vec![None, None, None]);
            e.wait_to_read(out).unwrap();
        }
    }

    #[test]
    fn a_failing_op_or_a_refused_guard_fails_the_new_variables_unwritten() {
        // The op fails after its guard started: the guard completes with the op's failure.
        let host: &'static RecordingHost = Box::leak(Box::default());
        let e = Engine::start_on(host);
        let (src, dst, out) = (Var::new(), Var::new(), Var::new());
        let ticket = e.push_batch(&[src], &[dst], 0, false, true, |_| Err(crate::Error::new("sum failed"))).unwrap();
        let detach: Detach = Box::new(|| -> Deferred { Box::new(|| panic!("no copy of a failed sum")) });
        assert!(e.try_extend(&ticket, &[out], || (), detach));
        host.start_at(1, None);
        host.start_at(0, None);
        assert_eq!(*host.completions.lock(), vec![Some("sum failed".to_string()), Some("sum failed".to_string())]);
        // The host skips the reader of a failed write.
        drop(host.pushed.lock().remove(0));
        assert_eq!(e.wait_to_read(out).unwrap_err().message(), "sum failed");

        // The host side refuses the guard (the output's memory was laid out anew): the op runs
        // without it, nothing is copied, and the output fails with the reason.
        let host: &'static RecordingHost = Box::leak(Box::default());
        let e = Engine::start_on(host);
        let (src, dst, out, log) = (Var::new(), Var::new(), Var::new(), Log::default());
        assert!(extended(e, src, dst, out, &log));
        host.start_at(1, Some("memory moved".into()));
        host.start_at(0, None);
        host.start_at(0, None);
        assert_eq!(*log.lock(), vec!["op ran, writing out: false"]);
        assert_eq!(*host.completions.lock(), vec![Some("memory moved".to_string()), None, None]);
        assert_eq!(e.wait_to_read(out).unwrap_err().message(), "memory moved");
        e.wait_to_read(dst).unwrap();
    }
}
