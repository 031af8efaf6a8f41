//! Turns at a key's updater: concurrent pushes to one key call its updater one at a time, so a
//! C updater's read-modify-write of `local` loses nothing; but a thread never waits for a turn
//! when waiting would close a cycle. Updaters may push into any store from any thread (two
//! stores whose updaters push into each other, driven from two threads): a thread that would
//! wait for a turn held, through a chain of waiting threads, by itself takes no turn and calls
//! its updater at once, as MXNet calls every updater (it serialises none). One table for all
//! stores, guarded by one mutex that is never held across a callback.

use once_cell::sync::Lazy;
use parking_lot::{Condvar, Mutex};
use std::collections::HashMap;
use std::thread::ThreadId;

/// A key of a store: the store's address and the key's internal id.
pub(crate) type Slot = (usize, i32);

#[derive(Default)]
struct Table {
    /// Who holds each slot's turn, and how many times (an updater may push to its own key).
    holders: HashMap<Slot, (ThreadId, usize)>,
    /// The slot each blocked thread waits for.
    waiting: HashMap<ThreadId, Slot>,
}

impl Table {
    /// Whether `me` waiting for `slot` would close a cycle: the chain holder of `slot` →
    /// the slot it waits for → its holder ... reaches `me`.
    fn closes_cycle(&self, me: ThreadId, mut slot: Slot) -> bool {
        for _ in 0..=self.waiting.len() {
            let Some(&(holder, _)) = self.holders.get(&slot) else { return false };
            if holder == me {
                return true;
            }
            match self.waiting.get(&holder) {
                Some(&next) => slot = next,
                None => return false,
            }
        }
        false
    }
}

static TABLE: Lazy<Mutex<Table>> = Lazy::new(Mutex::default);
static CHANGED: Lazy<Condvar> = Lazy::new(Condvar::new);

/// A turn at a slot's updater, given back when dropped (none when taking it would deadlock).
pub(crate) struct Turn {
    slot: Option<Slot>,
}

/// Waits for `slot`'s turn, unless its holder is this thread (the turn is re-entered) or
/// waiting would close a cycle of waiting threads (no turn is taken).
pub(crate) fn take(slot: Slot) -> Turn {
    let me = std::thread::current().id();
    let mut table = TABLE.lock();
    loop {
        match table.holders.get(&slot).map(|&(holder, _)| holder) {
            None => {
                table.holders.insert(slot, (me, 1));
                return Turn { slot: Some(slot) };
            }
            Some(holder) if holder == me => {
                if let Some((_, depth)) = table.holders.get_mut(&slot) {
                    *depth += 1;
                }
                return Turn { slot: Some(slot) };
            }
            Some(_) if table.closes_cycle(me, slot) => return Turn { slot: None },
            Some(_) => {
                table.waiting.insert(me, slot);
                CHANGED.wait(&mut table);
                table.waiting.remove(&me);
            }
        }
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        let Some(slot) = self.slot else { return };
        let mut table = TABLE.lock();
        if let Some((_, depth)) = table.holders.get_mut(&slot) {
            *depth -= 1;
            if *depth == 0 {
                table.holders.remove(&slot);
            }
        }
        drop(table);
        CHANGED.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Barrier};

    #[test]
    fn turns_are_exclusive_reentrant_and_never_close_a_cycle() {
        let (a, b) = ((1usize, 0), (2usize, 0));
        let outer = take(a);
        let inner = take(a);
        assert!(outer.slot.is_some() && inner.slot.is_some(), "re-entered by its holder");
        drop((inner, outer));
        // Two threads each hold one slot, then want the other's: one of them must go on.
        let gate = Arc::new(Barrier::new(2));
        let run = |mine: Slot, theirs: Slot, gate: Arc<Barrier>| {
            std::thread::spawn(move || {
                let held = take(mine);
                gate.wait();
                let other = take(theirs);
                let got = other.slot.is_some();
                drop(other);
                drop(held);
                got
            })
        };
        let (t1, t2) = (run(a, b, Arc::clone(&gate)), run(b, a, gate));
        let got = [t1.join().unwrap(), t2.join().unwrap()];
        assert!(got.contains(&false), "the thread closing the cycle takes no turn: {got:?}");
        assert!(TABLE.lock().holders.is_empty());
    }
}
