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
use super::marks::MarkRef;
use super::{Scheduler, ENGINE, SCHEDULER};
use crate::error::Result;
use once_cell::sync::Lazy;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

/// Slots made at a time when none is free (64 KiB).
const SLOTS_PER_BLOCK: usize = 1024;

/// One line per variable: the lines of neighbouring arrays are fetched together.
///
/// Its ops (the last writer, the reads since) are [`MarkRef`] words, read and written only by
/// registration under the engine's schedule lock (which orders them: relaxed loads and stores,
/// no lock or reference count per variable), and reset by [`Slots::give`] once no array names
/// the variable any more.
#[repr(align(64))]
#[derive(Default)]
pub(super) struct Slot {
    /// Names the variable in the poison table: new for every owner of the slot, never reused.
    id: AtomicU64,
    /// The op that wrote it last (0: none, or found finished by a read since).
    last_write: AtomicU64,
    /// The unfinished reads since: nearly always one op (the batch that last read it), kept
    /// here; more are rare and kept in `more_readers`, flagged by `has_more_readers`.
    first_reader: AtomicU64,
    has_more_readers: AtomicBool,
    // A box is 8 bytes inline where a vector is 24: what keeps the slot on one line.
    #[allow(clippy::box_collection)]
    more_readers: Mutex<Option<Box<Vec<u64>>>>,
    /// How many ops have been registered on it (see [`super::Engine::ops_on`]).
    ops: AtomicU64,
    /// Its token in the host's engine (0: none yet; see [`super::scheduler`]).
    token: AtomicUsize,
}

/// What registering an op on a variable found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Registration {
    /// Registered: the op's dependencies on the variable are added.
    Added,
    /// The op writes it already (listed as written and again, or as read too).
    WrittenByIt,
    /// The op read it already (listed twice).
    ReadByIt,
}

/// An op's dependencies: the unfinished ops it waits for, each with its mark.
pub(super) type Deps = Vec<(MarkRef, Arc<Completion>)>;

/// Adds the op `dep` names to an op's dependencies, unless it has finished or is among the
/// few added last: the arrays of one op usually come from the same few ops before it (a pull
/// of thousands of keys reads the sums of a few batches; a write after a read waits for the
/// read and the write before it), and each entry costs a waiter entry and a release.
#[inline(always)]
fn add_dep(deps: &mut Deps, dep: MarkRef) {
    if dep.pending() {
        add_pending_dep(deps, dep);
    }
}

fn add_pending_dep(deps: &mut Deps, dep: MarkRef) {
    const RECENT: usize = 4;
    if deps[deps.len().saturating_sub(RECENT)..].iter().any(|(d, _)| *d == dep) {
        return;
    }
    if let Some(completion) = dep.completion().filter(|c| !c.is_done()) {
        deps.push((dep, completion));
    }
}

impl Slot {
    /// The variable's id in the poison table.
    pub(super) fn id(&self) -> u64 {
        self.id.load(Ordering::Relaxed)
    }

    /// How many ops have been registered on it.
    pub(super) fn ops(&self) -> u64 {
        self.ops.load(Ordering::Acquire)
    }

    fn count_op(&self) {
        self.ops.store(self.ops.load(Ordering::Relaxed) + 1, Ordering::Release);
    }

    /// Registers a write by `op` (under the schedule lock): `op` waits for the last write and
    /// the reads since, and becomes the last writer.
    #[inline(always)]
    pub(super) fn register_write(&self, op: MarkRef, deps: &mut Deps) -> Registration {
        let last = self.last_write.load(Ordering::Relaxed);
        if last == op.word() {
            return Registration::WrittenByIt;
        }
        let (first, more) = self.take_readers();
        let more = more.into_iter().flat_map(|m| m.into_iter()).filter_map(MarkRef::from_word);
        for dep in MarkRef::from_word(last).into_iter().chain(first).chain(more) {
            add_dep(deps, dep);
        }
        self.last_write.store(op.word(), Ordering::Relaxed);
        self.count_op();
        Registration::Added
    }

    /// Registers a read by `op` (under the schedule lock): `op` waits for the last write, if
    /// unfinished, and joins the reads since.
    #[inline(always)]
    pub(super) fn register_read(&self, op: MarkRef, deps: &mut Deps) -> Registration {
        let last = self.last_write.load(Ordering::Relaxed);
        if last == op.word() {
            return Registration::WrittenByIt;
        }
        let first = self.first_reader.load(Ordering::Relaxed);
        let more = self.has_more_readers.load(Ordering::Relaxed);
        if !more && first == op.word() {
            return Registration::ReadByIt;
        }
        if more && self.more_readers.lock().as_ref().and_then(|m| m.last()) == Some(&op.word()) {
            return Registration::ReadByIt;
        }
        // A finished writer is forgotten: it is usually the op that filled the array long ago,
        // whose mark every later read would otherwise load.
        if let Some(writer) = MarkRef::from_word(last) {
            if writer.pending() {
                add_dep(deps, writer);
            } else {
                self.last_write.store(0, Ordering::Relaxed);
            }
        }
        let first_pending = MarkRef::from_word(first).is_some_and(|r| r.pending());
        if !more && !first_pending {
            self.first_reader.store(op.word(), Ordering::Relaxed);
        } else {
            self.add_reader_slowly(first_pending, op);
        }
        self.count_op();
        Registration::Added
    }

    /// Adds a read where another unfinished one is kept (rare), dropping the finished ones.
    #[cold]
    fn add_reader_slowly(&self, first_pending: bool, op: MarkRef) {
        let mut more = self.more_readers.lock();
        let readers = more.get_or_insert_with(Box::default);
        readers.retain(|&r| MarkRef::from_word(r).is_some_and(|r| r.pending()));
        if !first_pending {
            self.first_reader.store(readers.pop().unwrap_or(0), Ordering::Relaxed);
        }
        if self.first_reader.load(Ordering::Relaxed) == 0 {
            self.first_reader.store(op.word(), Ordering::Relaxed);
        } else {
            readers.push(op.word());
        }
        self.has_more_readers.store(!readers.is_empty(), Ordering::Relaxed);
    }

    /// Whether no op on it is unfinished (under the schedule lock).
    pub(super) fn is_free(&self) -> bool {
        let pending = |word: u64| MarkRef::from_word(word).is_some_and(|r| r.pending());
        !pending(self.last_write.load(Ordering::Relaxed))
            && !pending(self.first_reader.load(Ordering::Relaxed))
            && (!self.has_more_readers.load(Ordering::Relaxed) || self.more_readers.lock().iter().flat_map(|m| m.iter()).all(|&r| !pending(r)))
    }

    /// Makes `op` its last writer with no reads since (under the schedule lock, the variable
    /// free: see [`Slot::is_free`]).
    pub(super) fn take_over(&self, op: MarkRef) {
        drop(self.take_readers());
        self.last_write.store(op.word(), Ordering::Relaxed);
        self.count_op();
    }

    /// The unfinished op that wrote it last (tests).
    #[cfg(test)]
    pub(super) fn last_writer(&self) -> Option<Arc<Completion>> {
        MarkRef::from_word(self.last_write.load(Ordering::Relaxed)).and_then(|w| w.completion())
    }

    /// Whether it names a last writer, finished or not (tests).
    #[cfg(test)]
    pub(super) fn names_a_writer(&self) -> bool {
        self.last_write.load(Ordering::Relaxed) != 0
    }

    /// Empties it (no array names the variable any more).
    fn reset(&self) {
        drop(self.take_readers());
        self.last_write.store(0, Ordering::Relaxed);
        self.ops.store(0, Ordering::Relaxed);
    }

    /// Takes the reads since the last write, leaving none: the first, and any more.
    #[inline(always)]
    #[allow(clippy::box_collection)]
    fn take_readers(&self) -> (Option<MarkRef>, Option<Box<Vec<u64>>>) {
        let first = MarkRef::from_word(self.first_reader.load(Ordering::Relaxed));
        self.first_reader.store(0, Ordering::Relaxed);
        let more = self.has_more_readers.load(Ordering::Relaxed).then(|| {
            self.has_more_readers.store(false, Ordering::Relaxed);
            self.more_readers.lock().take()
        });
        (first, more.flatten())
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
        slot.id.store(NEXT_ID.fetch_add(1, Ordering::Relaxed), Ordering::Relaxed);
        slot
    }

    /// Empties `slot` (its token taken already) and frees it; its variable's id.
    fn give(&self, slot: &'static Slot) -> u64 {
        slot.reset();
        let id = slot.id.swap(0, Ordering::Relaxed);
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
    use super::super::marks;
    use super::*;

    /// Completes an op as the engine does: its completion, then its mark.
    fn finish((mark, completion): (MarkRef, Arc<Completion>)) {
        completion.complete(|| marks::give_back(mark));
    }

    #[test]
    fn a_slot_is_one_line_and_a_freed_one_serves_the_next_variable_empty_with_a_new_id() {
        assert_eq!(std::mem::size_of::<Slot>(), 64);
        let slots = Slots::default();
        let (a, b) = (slots.take(), slots.take());
        assert!(std::ptr::eq(b, (a as *const Slot).wrapping_add(1)), "a fresh block hands out its slots in address order");
        let id = a.id();
        let reader = marks::marked(false);
        let mut deps = Vec::new();
        assert_eq!(a.register_read(reader.0, &mut deps), Registration::Added);
        assert_eq!(a.ops(), 1);
        assert_eq!(slots.give(a), id);
        let c = slots.take();
        assert!(std::ptr::eq(a, c), "the slot freed last is taken first");
        assert!(c.id() > id, "ids are never reused");
        assert!(c.ops() == 0 && c.is_free() && !c.names_a_writer(), "a reused slot starts empty");
        let writer = marks::marked(false);
        assert_eq!(c.register_write(writer.0, &mut deps), Registration::Added);
        assert!(deps.is_empty(), "the previous owner's reader is not waited for");
        finish(reader);
        finish(writer);
    }

    #[test]
    fn reads_of_unfinished_ops_are_all_kept_and_a_write_waits_for_each_once() {
        let slot = Var::new().slot();
        let (first, second, writer) = (marks::marked(false), marks::marked(false), marks::marked(false));
        let mut deps = Vec::new();
        assert_eq!(slot.register_read(first.0, &mut deps), Registration::Added);
        assert_eq!(slot.register_read(first.0, &mut deps), Registration::ReadByIt);
        assert_eq!(slot.register_read(second.0, &mut deps), Registration::Added);
        assert_eq!(slot.register_read(second.0, &mut deps), Registration::ReadByIt);
        assert!(deps.is_empty() && !slot.is_free());
        assert_eq!(slot.register_write(writer.0, &mut deps), Registration::Added);
        let waited: Vec<_> = deps.iter().map(|(m, _)| *m).collect();
        assert_eq!(waited, vec![first.0, second.0]);
        assert!(Arc::ptr_eq(&deps[0].1, &first.1) && Arc::ptr_eq(&deps[1].1, &second.1));
        assert_eq!(slot.register_read(writer.0, &mut deps), Registration::WrittenByIt);
        finish(first);
        finish(second);
        assert!(!slot.is_free(), "the writer is unfinished");
        finish(writer);
        assert!(slot.is_free());
    }
}
