//! The map from a key's internal id to its entry, hashed cheaply (`base::id_hasher`): every
//! value of every call looks its key up.

use super::Entry;
use crate::base::id_hasher::IdHasher;
use std::collections::HashMap;
use std::hash::BuildHasherDefault;

/// Entries by internal id.
pub(crate) type Entries = HashMap<i32, Entry, BuildHasherDefault<IdHasher>>;
