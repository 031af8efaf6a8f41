//! What the int-key and string-key variants of each KVStore export share: reading the key
//! and handle arrays and calling the store behind the handle (`super::served`).

use super::args;
use super::handle;
use super::served::ServedStore;
use super::types::{KVStoreHandle, NDArrayHandle};
use crate::error::Result;
use crate::store::Keys;
use std::os::raw::{c_char, c_int};
use std::sync::Arc;

/// `n` array handles at `p`, whatever kind the store takes.
fn handles<'a>(p: *const NDArrayHandle, n: usize, arg: &str) -> Result<&'a [NDArrayHandle]> {
    args::slice(p, n, arg)
}

/// The store behind `h`, with the arrays it takes.
pub(crate) fn store(h: KVStoreHandle) -> Result<Arc<dyn ServedStore>> {
    handle::served_kvstore(h, "handle")
}

/// Int keys.
pub(crate) fn int_keys<'a>(keys: *const c_int, n: u32, arg: &str) -> Result<&'a [i32]> {
    args::slice(keys, args::len(n), arg)
}

/// String keys.
pub(crate) fn str_keys<'a>(keys: *const *const c_char, n: u32, arg: &str) -> Result<Vec<&'a str>> {
    args::strings(keys, args::len(n), arg)
}

/// `Init` for either key family.
pub(crate) fn init(h: KVStoreHandle, keys: Keys, vals: *const NDArrayHandle) -> Result<()> {
    let store = store(h)?;
    let vals = handles(vals, keys.len(), "vals")?;
    store.init(keys, vals)
}

/// `Push` for either key family.
pub(crate) fn push(h: KVStoreHandle, keys: Keys, vals: *const NDArrayHandle, priority: c_int) -> Result<()> {
    let store = store(h)?;
    let vals = handles(vals, keys.len(), "vals")?;
    store.push(keys, vals, priority)
}

/// `Pull` for either key family.
pub(crate) fn pull(h: KVStoreHandle, keys: Keys, outs: *const NDArrayHandle, priority: c_int, ignore_sparse: bool) -> Result<()> {
    let store = store(h)?;
    let outs = handles(outs, keys.len(), "vals")?;
    store.pull(keys, outs, priority, ignore_sparse)
}

/// `PullRowSparse` for either key family.
pub(crate) fn pull_row_sparse(
    h: KVStoreHandle,
    keys: Keys,
    outs: *const NDArrayHandle,
    row_ids: *const NDArrayHandle,
    priority: c_int,
) -> Result<()> {
    let store = store(h)?;
    let outs = handles(outs, keys.len(), "vals")?;
    let row_ids = handles(row_ids, keys.len(), "row_ids")?;
    store.pull_row_sparse(keys, outs, row_ids, priority)
}

/// Which of push-pull or broadcast a two-list call is.
pub(crate) enum TwoLists {
    PushPull,
    Broadcast,
}

/// `PushPull` and `Broadcast` for either key family.
pub(crate) fn two_lists(
    op: TwoLists,
    h: KVStoreHandle,
    (vkeys, okeys): (Keys, Keys),
    vals: *const NDArrayHandle,
    outs: *const NDArrayHandle,
    priority: c_int,
) -> Result<()> {
    let store = store(h)?;
    let vals = handles(vals, vkeys.len(), "vals")?;
    let outs = handles(outs, okeys.len(), "outs")?;
    match op {
        TwoLists::PushPull => store.push_pull((vkeys, okeys), vals, outs, priority),
        TwoLists::Broadcast => store.broadcast((vkeys, okeys), vals, outs, priority),
    }
}
