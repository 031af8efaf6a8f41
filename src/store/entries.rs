//! The store's entries, by a key's internal id. Every value of every call looks its key up, so
//! the entries sit in one vector in the order their keys were initialised (a call's keys,
//! usually initialised together, are then neighbours in memory, which the CPU fetches ahead),
//! and the map from id to place is small (eight bytes a key) and hashed cheaply
//! (`base::id_hasher`). Entries are never removed: a store keeps its keys.

use super::Entry;
use crate::base::id_hasher::IdHasher;
use std::collections::{HashMap, TryReserveError};
use std::hash::BuildHasherDefault;

/// Entries by internal id.
#[derive(Default)]
pub(crate) struct Entries {
    places: HashMap<i32, u32, BuildHasherDefault<IdHasher>>,
    entries: Vec<Entry>,
    /// Each entry's id, by place (see [`Entries::find_near`]).
    ids: Vec<i32>,
}

impl Entries {
    pub(crate) fn get(&self, id: &i32) -> Option<&Entry> {
        self.places.get(id).and_then(|&at| self.entries.get(at as usize))
    }

    pub(crate) fn get_mut(&mut self, id: &i32) -> Option<&mut Entry> {
        self.places.get(id).and_then(|&at| self.entries.get_mut(at as usize))
    }

    /// `id`'s place and entry. A place names the entry for the store's life (entries are
    /// replaced in place, never removed): a call's plan keeps it, and its later passes over
    /// the keys index the vector instead of hashing each id again.
    pub(crate) fn find(&self, id: &i32) -> Option<(u32, &Entry)> {
        self.places.get(id).and_then(|&at| self.entries.get(at as usize).map(|e| (at, e)))
    }

    /// [`Entries::find`], trying `guess` first. A call usually lists its keys in the order they
    /// were initialised, so a loop over them passes the place after the previous key's: one
    /// load from a vector read in order instead of a probe of the map per key.
    #[inline(always)]
    pub(crate) fn find_near(&self, id: &i32, guess: u32) -> Option<(u32, &Entry)> {
        match (self.ids.get(guess as usize), self.entries.get(guess as usize)) {
            (Some(at), Some(entry)) if at == id => Some((guess, entry)),
            _ => self.find(id),
        }
    }

    /// The entry at `place` (see [`Entries::find`]).
    #[inline(always)]
    pub(crate) fn at(&self, place: u32) -> Option<&Entry> {
        self.entries.get(place as usize)
    }

    /// The entry at `place`, to change.
    #[inline(always)]
    pub(crate) fn at_mut(&mut self, place: u32) -> Option<&mut Entry> {
        self.entries.get_mut(place as usize)
    }

    pub(crate) fn contains_key(&self, id: &i32) -> bool {
        self.places.contains_key(id)
    }

    /// Sets `id`'s entry, replacing any it had.
    pub(crate) fn insert(&mut self, id: i32, entry: Entry) {
        match self.places.get(&id).and_then(|&at| self.entries.get_mut(at as usize)) {
            Some(old) => *old = entry,
            None => {
                // At most 2^32 keys: ids are i32, and no two keys share one.
                self.places.insert(id, self.entries.len() as u32);
                self.entries.push(entry);
                self.ids.push(id);
            }
        }
    }

    /// Room for `more` entries, so that inserting them cannot fail for memory.
    pub(crate) fn try_reserve(&mut self, more: usize) -> Result<(), TryReserveError> {
        self.places.try_reserve(more)?;
        self.ids.try_reserve(more)?;
        self.entries.try_reserve(more)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ndarray::{Context, DType, NDArray};

    fn entry(len: usize) -> Entry {
        Entry::new(NDArray::zeros(&[len], Context::cpu(0), DType::Float32).unwrap())
    }

    /// Keys 7, -3 and 2^30 in that order, with values of 1, 2 and 3 elements.
    fn three_keys() -> Entries {
        let mut e = Entries::default();
        e.try_reserve(3).unwrap();
        for (id, len) in [(7, 1), (-3, 2), (1 << 30, 3)] {
            e.insert(id, entry(len));
        }
        e
    }

    #[test]
    fn entries_are_found_by_id_and_replaced_in_place() {
        let mut e = three_keys();
        assert!(e.contains_key(&-3) && !e.contains_key(&8));
        assert_eq!(e.get(&7).map(|x| x.stored.size()), Some(1));
        assert_eq!(e.get(&(1 << 30)).map(|x| x.stored.size()), Some(3));
        e.insert(-3, entry(5));
        assert_eq!(e.get(&-3).map(|x| x.stored.size()), Some(5));
        assert_eq!(e.entries.len(), 3, "a replaced entry keeps its place");
        e.get_mut(&7).unwrap().stored = NDArray::zeros(&[4], Context::cpu(0), DType::Float32).unwrap();
        assert_eq!(e.get(&7).map(|x| x.stored.size()), Some(4));
        assert!(e.get(&8).is_none() && e.get_mut(&8).is_none() && e.find(&8).is_none());
        let (place, found) = e.find(&-3).unwrap();
        assert_eq!(found.stored.size(), 5);
        e.insert(-3, entry(6));
        assert_eq!(e.at(place).map(|x| x.stored.size()), Some(6), "a place names its key's entry after a replacement");
        e.at_mut(place).unwrap().stored = NDArray::zeros(&[7], Context::cpu(0), DType::Float32).unwrap();
        assert_eq!(e.get(&-3).map(|x| x.stored.size()), Some(7));
    }

    #[test]
    fn a_near_find_takes_its_guess_only_where_the_guess_holds_the_key() {
        let mut e = three_keys();
        let sizes = |found: Option<(u32, &Entry)>| found.map(|(place, x)| (place, x.stored.size()));
        assert_eq!(sizes(e.find_near(&-3, 1)), Some((1, 2)), "the right guess");
        assert_eq!(sizes(e.find_near(&-3, 0)), Some((1, 2)), "a wrong guess falls back to the map");
        assert_eq!(sizes(e.find_near(&(1 << 30), 3)), Some((2, 3)), "a guess past the end");
        assert_eq!(sizes(e.find_near(&7, u32::MAX)), Some((0, 1)));
        assert!(e.find_near(&8, 0).is_none() && e.find_near(&8, 5).is_none(), "an unknown key is not found near anything");
        e.insert(-3, entry(9));
        assert_eq!(sizes(e.find_near(&-3, 1)), Some((1, 9)), "a replaced entry keeps its place and id");
    }
}
