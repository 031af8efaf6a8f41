//! Keys: a store holds int keys or string keys, never both; string keys get internal ids
//! 0, 1, 2, ... in the order they are first initialised, as in MXNet.

use crate::error::Result;
use std::collections::HashMap;
use std::ffi::CString;

/// The keys of one call.
#[derive(Debug, Clone, Copy)]
pub enum Keys<'a> {
    /// Int keys (`MXKVStorePush` and friends).
    Int(&'a [i32]),
    /// String keys (the `…Ex` calls).
    Str(&'a [&'a str]),
}

impl Keys<'_> {
    /// Number of keys.
    pub fn len(&self) -> usize {
        match self {
            Keys::Int(k) => k.len(),
            Keys::Str(k) => k.len(),
        }
    }

    /// Whether there are no keys.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn key_type(&self) -> KeyType {
        match self {
            Keys::Int(_) => KeyType::Int,
            Keys::Str(_) => KeyType::Str,
        }
    }

    /// Key `i` as the user wrote it, for messages.
    pub fn display(&self, i: usize) -> String {
        match self {
            Keys::Int(k) => k[i].to_string(),
            Keys::Str(k) => k[i].to_string(),
        }
    }
}

/// Which family of keys a store uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyType {
    /// int keys
    Int,
    /// string keys
    Str,
}

impl KeyType {
    fn name(self) -> &'static str {
        match self {
            KeyType::Int => "int",
            KeyType::Str => "string",
        }
    }
}

/// A point in a registry's history (see [`KeyRegistry::mark`]).
#[derive(Debug, Clone, Copy)]
pub struct RegistryMark {
    key_type: Option<KeyType>,
    names: usize,
}

/// The store's key family and its string ↔ id mapping.
#[derive(Debug, Clone, Default)]
pub struct KeyRegistry {
    key_type: Option<KeyType>,
    ids: HashMap<String, i32>,
    names: Vec<CString>,
}

impl KeyRegistry {
    /// The key family fixed by the first call, if any.
    pub fn key_type(&self) -> Option<KeyType> {
        self.key_type
    }

    /// Fails when `keys` are of the other family than the store's.
    pub fn check_type(&self, keys: &Keys) -> Result<()> {
        if keys.is_empty() {
            return Ok(());
        }
        match self.key_type {
            Some(t) if t != keys.key_type() => crate::bail!(
                "Mixed key types are not allowed: this store uses {} keys, the call passes {} keys",
                t.name(),
                keys.key_type().name()
            ),
            _ => Ok(()),
        }
    }

    /// Fixes the store's key family (after a successful call).
    pub fn fix_type(&mut self, keys: &Keys) {
        if !keys.is_empty() && self.key_type.is_none() {
            self.key_type = Some(keys.key_type());
        }
    }

    /// Internal ids of existing keys: int keys are their own ids; unknown strings fail.
    pub fn lookup(&self, keys: &Keys) -> Result<Vec<i32>> {
        self.check_type(keys)?;
        match keys {
            Keys::Int(k) => Ok(k.to_vec()),
            Keys::Str(k) => k
                .iter()
                .map(|s| match self.ids.get(*s) {
                    Some(id) => Ok(*id),
                    None => crate::bail!("key {s} doesn't exist. Did you init?"),
                })
                .collect(),
        }
    }

    /// Where the registry stands now, to return to with [`KeyRegistry::rollback`].
    pub fn mark(&self) -> RegistryMark {
        RegistryMark { key_type: self.key_type, names: self.names.len() }
    }

    /// Forgets every key registered since `mark` (a failing call's), in time proportional to
    /// their number: a store initialised one key at a time must not copy its table per call.
    pub fn rollback(&mut self, mark: RegistryMark) {
        for name in self.names.drain(mark.names.min(self.names.len())..) {
            self.ids.remove(&*name.to_string_lossy());
        }
        self.key_type = mark.key_type;
    }

    /// Internal ids for keys being initialised, registering new strings; a string that is
    /// already known fails (MXNet: duplicate init). A failure registers nothing.
    pub fn register(&mut self, keys: &Keys) -> Result<Vec<i32>> {
        let mark = self.mark();
        let ids = self.register_all(keys);
        if ids.is_err() {
            self.rollback(mark);
        }
        ids
    }

    fn register_all(&mut self, keys: &Keys) -> Result<Vec<i32>> {
        self.check_type(keys)?;
        let ids = match keys {
            Keys::Int(k) => k.to_vec(),
            Keys::Str(k) => {
                let oom = |_| crate::Error::out_of_memory("the store's key names");
                let mut ids = Vec::new();
                ids.try_reserve_exact(k.len()).map_err(oom)?;
                self.ids.try_reserve(k.len()).map_err(oom)?;
                self.names.try_reserve(k.len()).map_err(oom)?;
                for s in k.iter() {
                    crate::ensure!(!self.ids.contains_key(*s), "duplicate init of key {s}");
                    let id = i32::try_from(self.names.len()).map_err(|_| crate::Error::new("too many string keys"))?;
                    let name = CString::new(*s).map_err(|_| crate::Error::new("key contains a NUL byte"))?;
                    self.ids.insert((*s).to_string(), id);
                    self.names.push(name);
                    ids.push(id);
                }
                ids
            }
        };
        self.fix_type(keys);
        Ok(ids)
    }

    /// The string of internal id `id` in a string-key store.
    pub fn name(&self, id: i32) -> Option<&CString> {
        usize::try_from(id).ok().and_then(|i| self.names.get(i))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_keys_get_ids_in_init_order_and_key_families_do_not_mix() {
        let mut r = KeyRegistry::default();
        assert_eq!(r.register(&Keys::Str(&["b", "a"])).unwrap(), vec![0, 1]);
        assert_eq!(r.register(&Keys::Str(&["c"])).unwrap(), vec![2]);
        assert!(r.register(&Keys::Str(&["a"])).unwrap_err().message().contains("duplicate init of key a"));
        assert_eq!(r.lookup(&Keys::Str(&["a", "c", "a"])).unwrap(), vec![1, 2, 1]);
        assert!(r.lookup(&Keys::Str(&["zz"])).unwrap_err().message().contains("doesn't exist"));
        assert!(r.lookup(&Keys::Int(&[1])).unwrap_err().message().contains("Mixed key types"));
        assert!(r.lookup(&Keys::Int(&[])).is_ok(), "an empty call has no key type");
        assert_eq!(r.name(1).unwrap().to_str().unwrap(), "a");
    }
}
