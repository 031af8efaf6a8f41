//! Adding writes to an op that has not started: a pull queued right behind the push of a key
//! can be done by the push's own op, which writes the outputs in the same pass over memory as
//! the sum (see `store::fusion`).
//!
//! The op may take over a variable only when nothing is pending on it: then no earlier op can
//! still read or write it, and every later op on it is registered after this one and so waits
//! for it, exactly as for a write the op had declared when it was scheduled. A variable with a
//! pending op, a kept failure, or an op that has started refuses, and the caller schedules an
//! op of its own. Where a host's engine runs the ops, see `host_extend`.

use super::host_extend::{Detach, HostExtension};
use super::{Engine, Op};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

/// Names an op scheduled earlier, for [`Engine::try_extend`]; holds nothing alive.
#[derive(Clone)]
pub struct Ticket(Weak<Op>);

impl Ticket {
    pub(super) fn of(op: &Arc<Op>) -> Ticket {
        Ticket(Arc::downgrade(op))
    }
}

impl Engine {
    /// Makes the op of `ticket` also write `writes`, and runs `attach` (which hands the op what
    /// to write) while the op cannot start; `false`, nothing changed and `attach` not run, when
    /// the op has started or finished, or a variable has an op pending or a failure kept. Every
    /// later op on `writes` then waits for this op. Where a host's engine runs the ops, the op
    /// may yet start without them (see [`super::host_extend`]): it then calls `detach`, which
    /// takes back what `attach` handed it as work that runs once the host lets it write them.
    pub fn try_extend(&'static self, ticket: &Ticket, writes: &[super::Var], attach: impl FnOnce(), detach: Detach) -> bool {
        let Some(op) = ticket.0.upgrade() else { return false };
        let _guard = self.schedule_lock.lock();
        // Held until the op owns the variables: a worker taking the work waits for it.
        let work = op.work.lock();
        if work.is_none() || op.host_started.load(Ordering::Acquire) {
            return false;
        }
        let ids: Vec<u64> = writes.iter().map(|v| v.slot().id()).collect();
        if self.poison.find(&ids).is_some() {
            return false;
        }
        if !writes.iter().all(|v| v.slot().is_free()) {
            return false;
        }
        if let Some(host) = self.host_scheduler() {
            let ext = HostExtension::new(ids.clone(), detach);
            if !self.queue_host_extension(host, &op, writes, &ext) {
                return false;
            }
            op.host_extensions.lock().push(ext);
        }
        for var in writes {
            var.slot().take_over(op.mark);
        }
        op.extra_writes.lock().extend(ids);
        attach();
        drop(work);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Engine, Var};
    use parking_lot::Mutex;
    use std::sync::{Arc, Barrier};

    type Log = Arc<Mutex<Vec<&'static str>>>;

    /// Natively an extended op always writes its new variables: nothing is taken back.
    fn no_detach() -> super::Detach {
        Box::new(|| Box::new(|| Ok(())))
    }

    /// Schedules an op writing `var` that waits at `gate` until the test lets it go.
    fn held_op(e: &'static Engine, var: Var, gate: &Arc<Barrier>, log: &Log) {
        let (g, l) = (Arc::clone(gate), Arc::clone(log));
        e.push(&[], &[var], 0, move |_| {
            g.wait();
            l.lock().push("first");
            Ok(())
        });
    }

    // On engines of their own: a failure on the shared one would surface at another test's
    // `wait_all`.

    #[test]
    fn an_op_waiting_for_another_takes_over_free_variables_and_later_ops_wait_for_it() {
        let e = Engine::start();
        let (blocker, var, out) = (Var::new(), Var::new(), Var::new());
        let (gate, log): (_, Log) = (Arc::new(Barrier::new(2)), Arc::default());
        held_op(e, blocker, &gate, &log);
        // Waits for the held op, so it cannot start while the test extends it.
        let l = Arc::clone(&log);
        let ticket = e.push_batch(&[blocker], &[var], 0, false, true, move |_| {
            l.lock().push("extended");
            Ok(())
        })
        .unwrap();
        let attached = Arc::new(Mutex::new(false));
        let a = Arc::clone(&attached);
        assert!(e.try_extend(&ticket, &[out], move || *a.lock() = true, no_detach()));
        assert!(*attached.lock());
        let l = Arc::clone(&log);
        e.push(&[out], &[], 0, move |_| {
            l.lock().push("reader of the new write");
            Ok(())
        });
        // A variable with an op pending (the reader) refuses, and `attach` does not run.
        assert!(!e.try_extend(&ticket, &[out], || panic!("attached to a busy variable"), no_detach()));
        gate.wait();
        e.wait_to_write(out).unwrap();
        assert_eq!(*log.lock(), vec!["first", "extended", "reader of the new write"]);
        // A finished op refuses.
        assert!(!e.try_extend(&ticket, &[Var::new()], || panic!("attached to a finished op"), no_detach()));
    }

    #[test]
    fn a_failing_extended_op_poisons_its_new_writes_and_a_poisoned_variable_refuses() {
        let e = Engine::start();
        let (blocker, var, out) = (Var::new(), Var::new(), Var::new());
        let (gate, log): (_, Log) = (Arc::new(Barrier::new(2)), Arc::default());
        held_op(e, blocker, &gate, &log);
        let ticket = e.push_batch(&[blocker], &[var], 0, false, true, |_| Err(crate::Error::new("extended op failed"))).unwrap();
        assert!(e.try_extend(&ticket, &[out], || (), no_detach()));
        gate.wait();
        let err = e.wait_to_read(out).unwrap_err();
        assert!(err.message().contains("extended op failed"), "{err}");
        e.wait_all().unwrap();

        let (poisoned, other) = (Var::new(), Var::new());
        e.push(&[], &[poisoned], 0, |_| Err(crate::Error::new("kept failure")));
        // Finished, its failure kept (a wait would clear it).
        while poisoned.slot().last_writer().is_some_and(|w| !w.is_done()) {
            std::thread::yield_now();
        }
        held_op(e, blocker, &gate, &log);
        let ticket = e.push_batch(&[blocker], &[other], 0, false, true, |_| Ok(())).unwrap();
        assert!(!e.try_extend(&ticket, &[poisoned], || panic!("attached to a poisoned variable"), no_detach()));
        gate.wait();
        e.wait_to_write(other).unwrap();
        assert_eq!(e.wait_to_read(poisoned).unwrap_err().message(), "kept failure");
    }
}
