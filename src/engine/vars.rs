//! The engine's variables. A variable's state (its last writer, the reads since, its host
//! token) lives in a slot of a table of slots, not in the chunk it orders: a call over thousands
//! of arrays registers each one's variable, and its arrays keep the [`Var`] inline, side by
//! side in the call's vector, so registration reads slots that sit together in the table
//! instead of a line in every array's chunk (which the data a call moves evicts between calls).
//!
//! A [`Var`] names a slot and is copied freely; the chunk holds the slot's [`OwnedVar`], which
//! returns it to the table when the chunk goes. Slots are never freed, so a `Var` always names
//! live memory; one copied past its owner's end names a slot that may serve another variable
//! (the ops holding arrays keep their owners alive, so no op does).

use super::completion::Completion;
use super::{Scheduler, ENGINE, SCHEDULER};
use crate::error::Result;
use once_cell::sync::Lazy;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

/// Slots made at a time when none is free (64 KiB).
const SLOTS_PER_BLOCK: usize = 1024;

/// One line per variable: the lines of neighbouring arrays are fetched together.
#[repr(align(64))]
#[derive(Default)]
pub(super) struct Slot {
    pub(super) state: Mutex<VarState>,
    /// Its token in the host's engine (0: none yet; see [`super::scheduler`]).
    token: AtomicUsize,
}

#[derive(Default)]
pub(super) struct VarState {
    /// Names the variable in the poison table: new for every owner of the slot, never reused.
    pub(super) id: u64,
    pub(super) last_write: Option<Arc<Completion>>,
    pub(super) reads_since_write: Readers,
    /// How many ops have been registered on it (see [`super::Engine::ops_on`]).
    pub(super) ops: u64,
}

/// The unfinished reads of a variable since its last write. Nearly always one op (the batch
/// that last read it), kept inline; more are rare and boxed, which keeps a slot on one line.
#[derive(Default)]
pub(super) struct Readers {
    pub(super) first: Option<Arc<Completion>>,
    // A box is 8 bytes inline where a vector is 24: what keeps the slot on one line.
    #[allow(clippy::box_collection)]
    more: Option<Box<Vec<Arc<Completion>>>>,
}

impl Readers {
    /// Drops the finished reads.
    pub(super) fn prune(&mut self) {
        if self.first.as_ref().is_some_and(|c| c.is_done()) {
            self.first = None;
        }
        if let Some(more) = &mut self.more {
            more.retain(|c| !c.is_done());
            if self.first.is_none() {
                self.first = more.pop();
            }
        }
    }

    /// Whether `op` is the read added last (the variable is listed twice).
    pub(super) fn ends_with(&self, op: &Arc<Completion>) -> bool {
        self.more.as_ref().and_then(|m| m.last()).or(self.first.as_ref()).is_some_and(|c| Arc::ptr_eq(c, op))
    }

    /// Adds `op`'s read.
    pub(super) fn add(&mut self, op: &Arc<Completion>) {
        match self.first {
            None => self.first = Some(Arc::clone(op)),
            Some(_) => self.more.get_or_insert_with(Box::default).push(Arc::clone(op)),
        }
    }

    /// Whether every read has finished.
    pub(super) fn all_done(&self) -> bool {
        self.first.iter().chain(self.more.iter().flat_map(|m| m.iter())).all(|r| r.is_done())
    }

    /// Takes every read, leaving none.
    pub(super) fn take_all(&mut self) -> impl Iterator<Item = Arc<Completion>> {
        self.first.take().into_iter().chain(self.more.take().map(|m| *m).unwrap_or_default())
    }
}

/// The slots no variable holds, the last freed on top: a new array reuses the line of the one
/// dropped last, and a fresh block hands out its slots in address order.
#[derive(Default)]
struct Slots {
    free: Mutex<Vec<&'static Slot>>,
}

impl Slots {
    /// A slot for a new variable, empty, with a new id.
    fn take(&self) -> &'static Slot {
        let slot = {
            let mut free = self.free.lock();
            match free.pop() {
                Some(slot) => slot,
                None => {
                    let block: &'static [Slot] = (0..SLOTS_PER_BLOCK).map(|_| Slot::default()).collect::<Vec<_>>().leak();
                    free.extend(block[1..].iter().rev());
                    &block[0]
                }
            }
        };
        slot.state.lock().id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        slot
    }

    /// Empties `slot` (its token taken already) and frees it; its variable's id.
    fn give(&self, slot: &'static Slot) -> u64 {
        let id = std::mem::take(&mut *slot.state.lock()).id;
        self.free.lock().push(slot);
        id
    }
}

static SLOTS: Lazy<Slots> = Lazy::new(Slots::default);

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// An engine variable: what ops name as read or written. Copied freely (see the module).
#[derive(Clone, Copy)]
pub struct Var(&'static Slot);

impl std::fmt::Debug for Var {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Var({:p})", self.0)
    }
}

impl PartialEq for Var {
    fn eq(&self, other: &Var) -> bool {
        std::ptr::eq(self.0, other.0)
    }
}

impl Eq for Var {}

impl Var {
    pub(super) fn slot(self) -> &'static Slot {
        self.0
    }

    /// A variable whose slot is never returned (tests: it outlives every op on it).
    #[cfg(test)]
    pub(crate) fn new() -> Var {
        let owner = OwnedVar::new();
        let var = owner.var();
        std::mem::forget(owner);
        var
    }

    /// Its token in `host`'s engine, made on first use.
    pub(super) fn token(self, host: &dyn Scheduler) -> Result<usize> {
        let token = self.0.token.load(Ordering::Acquire);
        if token != 0 {
            return Ok(token);
        }
        let made = host.new_token()?;
        match self.0.token.compare_exchange(0, made, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => Ok(made),
            Err(theirs) => {
                host.release_token(made);
                Ok(theirs)
            }
        }
    }

    /// Its token, if it has one.
    pub(super) fn existing_token(self) -> Option<usize> {
        Some(self.0.token.load(Ordering::Acquire)).filter(|&t| t != 0)
    }

    /// Makes `token` its token, unless it has one.
    pub(super) fn bind_token(self, token: usize) -> bool {
        self.0.token.compare_exchange(0, token, Ordering::AcqRel, Ordering::Acquire).is_ok()
    }

    /// Takes its token (0: none).
    pub(super) fn take_token(self) -> usize {
        self.0.token.swap(0, Ordering::AcqRel)
    }
}

/// The variable of one storage chunk, returned to the table with it.
pub struct OwnedVar(Var);

impl Default for OwnedVar {
    fn default() -> OwnedVar {
        OwnedVar(Var(SLOTS.take()))
    }
}

impl OwnedVar {
    /// A variable with no pending operation.
    pub fn new() -> OwnedVar {
        OwnedVar::default()
    }

    /// The variable, to name in ops.
    pub fn var(&self) -> Var {
        self.0
    }
}

impl Drop for OwnedVar {
    fn drop(&mut self) {
        let token = self.0.take_token();
        if let (true, Some(host)) = (token != 0, SCHEDULER.get()) {
            host.release_token(token);
        }
        let id = SLOTS.give(self.0 .0);
        // A failure nobody waited for goes with its variable (`WaitAll` still reports it).
        if let Some(engine) = Lazy::get(&ENGINE) {
            engine.poison.forget(id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_is_one_line_and_a_freed_one_serves_the_next_variable_empty_with_a_new_id() {
        assert_eq!(std::mem::size_of::<Slot>(), 64);
        let slots = Slots::default();
        let (a, b) = (slots.take(), slots.take());
        assert!(std::ptr::eq(b, (a as *const Slot).wrapping_add(1)), "a fresh block hands out its slots in address order");
        let id = a.state.lock().id;
        a.state.lock().ops = 3;
        a.state.lock().reads_since_write.add(&Arc::new(Completion::new(false)));
        assert_eq!(slots.give(a), id);
        let c = slots.take();
        assert!(std::ptr::eq(a, c), "the slot freed last is taken first");
        let s = c.state.lock();
        assert!(s.id > id, "ids are never reused");
        assert!(s.ops == 0 && s.reads_since_write.first.is_none() && s.last_write.is_none(), "a reused slot starts empty");
    }
}
