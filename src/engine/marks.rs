//! Marks: how variables' slots name the ops that last wrote or read them. A mark is an entry
//! of a table that is never freed, taken by an op's completion as the op registers and given
//! back when it completes; its generation counts its uses. A slot holds a [`MarkRef`] (entry
//! and generation in one word): while the generation matches, the op is unfinished; once the
//! mark is given back, every reference to that use reads as finished. An entry whose generation
//! would wrap is retired instead of reused, so an old reference never matches a later use.
//!
//! Registration so reads and writes a variable's ops with plain loads and stores (under the
//! engine's schedule lock), where a reference-counted completion per slot took a locked
//! increment and decrement per variable, and a lock of its own per slot two more.

use super::completion::Completion;
use once_cell::sync::{Lazy, OnceCell};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Entries made at a time when none is free (64 KiB).
const PER_BLOCK: usize = 1024;
/// At most this many blocks: about four million unfinished ops at once.
const BLOCKS: usize = 4096;
/// Bits of a reference that hold the entry's index (`BLOCKS * PER_BLOCK` entries); the rest
/// hold its generation.
const INDEX_BITS: u32 = 22;
const GENERATION_BITS: u32 = 64 - INDEX_BITS;
/// The last generation an entry may have: 2^41 uses, then it is retired.
const LAST_GENERATION: u64 = (1 << GENERATION_BITS) - 1;

/// An op's use of a mark, as slots keep it: the entry's index and the generation it had while
/// the op was unfinished. Never 0, which slots use for "none".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct MarkRef(u64);

impl MarkRef {
    /// The word a slot stores.
    pub(super) fn word(self) -> u64 {
        self.0
    }

    /// The reference stored as `word`, if any.
    pub(super) fn from_word(word: u64) -> Option<MarkRef> {
        (word != 0).then_some(MarkRef(word))
    }

    fn new(index: u32, generation: u64) -> MarkRef {
        MarkRef((u64::from(index) << GENERATION_BITS) | (generation & LAST_GENERATION))
    }

    fn index(self) -> usize {
        (self.0 >> GENERATION_BITS) as usize
    }

    fn generation(self) -> u64 {
        self.0 & LAST_GENERATION
    }

    /// Whether the op it names is still unfinished (its mark not given back).
    #[inline(always)]
    pub(super) fn pending(self) -> bool {
        MARKS.entry(self.index()).is_some_and(|m| m.generation.load(Ordering::Acquire) == self.generation())
    }

    /// The completion of the op it names, while that op is unfinished.
    pub(super) fn completion(self) -> Option<Arc<Completion>> {
        let mark = MARKS.entry(self.index())?;
        let held = mark.completion.lock();
        // Read under the lock that `give` bumps it under: the completion is this use's.
        if mark.generation.load(Ordering::Acquire) != self.generation() {
            return None;
        }
        held.clone()
    }
}

// A line each: the ops of one call's thousands of variables are a few marks, read once per
// variable; a mark given back on a completion thread does not evict its neighbours.
#[repr(align(64))]
#[derive(Default)]
struct Mark {
    /// Odd while in use (an op holds it), even while free: a reference to one use matches it
    /// only during that use.
    generation: AtomicU64,
    completion: Mutex<Option<Arc<Completion>>>,
}

struct Marks {
    blocks: Vec<OnceCell<Box<[Mark]>>>,
    /// Indexes of the free entries, the last given back on top; and how many blocks are made.
    free: Mutex<(Vec<u32>, usize)>,
}

static MARKS: Lazy<Marks> = Lazy::new(|| Marks { blocks: (0..BLOCKS).map(|_| OnceCell::new()).collect(), free: Mutex::new((Vec::new(), 0)) });

impl Marks {
    #[inline(always)]
    fn entry(&self, index: usize) -> Option<&Mark> {
        self.blocks.get(index / PER_BLOCK)?.get()?.get(index % PER_BLOCK)
    }

    /// A free entry's index; waits while all four million are in use.
    fn take_index(&self) -> u32 {
        loop {
            let mut free = self.free.lock();
            if let Some(index) = free.0.pop() {
                return index;
            }
            let block = free.1;
            if block < BLOCKS {
                let made = self.blocks[block].get_or_init(|| (0..PER_BLOCK).map(|_| Mark::default()).collect());
                free.1 += 1;
                let first = (block * PER_BLOCK) as u32;
                free.0.extend((first + 1..first + made.len() as u32).rev());
                return first;
            }
            drop(free);
            std::thread::yield_now();
        }
    }
}

/// A new op's completion and its mark: until [`give_back`], references to the mark are
/// pending.
pub(super) fn marked(device: bool) -> (MarkRef, Arc<Completion>) {
    let index = MARKS.take_index();
    let completion = Arc::new(Completion::new(device));
    let Some(entry) = MARKS.entry(index as usize) else {
        // Unreachable: `take_index` hands out indexes of blocks it made.
        return (MarkRef::new(index, 1), completion);
    };
    let mut held = entry.completion.lock();
    let generation = entry.generation.load(Ordering::Acquire) + 1;
    *held = Some(Arc::clone(&completion));
    entry.generation.store(generation, Ordering::Release);
    (MarkRef::new(index, generation), completion)
}

/// Ends the use `mark` names, as its op's completion completes (under the completion's lock;
/// the op holds the completion, so the mark's reference is never its last): every reference to it
/// reads as finished from now on (and a registration that finds so sees the op's writes: the
/// generation is released after them), and the entry serves the next op.
pub(super) fn give_back(mark: MarkRef) {
    let Some(entry) = MARKS.entry(mark.index()) else { return };
    let completion = {
        let mut held = entry.completion.lock();
        if entry.generation.load(Ordering::Acquire) != mark.generation() {
            return;
        }
        entry.generation.fetch_add(1, Ordering::AcqRel);
        held.take()
    };
    // Its next use would be odd and at most LAST_GENERATION: reused only while one is left.
    if mark.generation() + 2 <= LAST_GENERATION {
        MARKS.free.lock().0.push(mark.index() as u32);
    }
    drop(completion);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mark_is_pending_until_given_back_and_its_next_use_is_another_reference() {
        let (mark, completion) = marked(false);
        assert!(mark.pending());
        assert!(Arc::ptr_eq(&mark.completion().unwrap(), &completion));
        give_back(mark);
        assert!(!mark.pending(), "a given-back mark reads as finished");
        assert!(mark.completion().is_none());
        let (next, other) = marked(false);
        assert_ne!(next, mark, "a reused entry is another reference");
        assert!(!mark.pending() && next.pending());
        give_back(mark);
        assert!(next.pending(), "giving back an old use again changes nothing");
        give_back(next);
        assert_eq!(Arc::strong_count(&other), 1, "the mark lets its completion go");
    }

    #[test]
    fn a_reference_holds_every_index_and_generation_and_the_table_fits_its_bits() {
        assert_eq!(BLOCKS * PER_BLOCK, 1 << INDEX_BITS);
        let last_index = (BLOCKS * PER_BLOCK - 1) as u32;
        for (index, generation) in [(0, 1), (last_index, 1), (0, LAST_GENERATION), (last_index, LAST_GENERATION), (12345, 987654321)] {
            let r = MarkRef::new(index, generation);
            assert_eq!((r.index(), r.generation()), (index as usize, generation));
            assert_eq!(MarkRef::from_word(r.word()), Some(r));
        }
    }
}
