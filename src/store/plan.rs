//! Validation of a call before anything changes: every check runs first and yields a plan, so
//! a bad input fails with the store exactly as it was.

use crate::backend::CopyJob;
use crate::error::Result;
use crate::ndarray::{shape_string, Context, NDArray, StorageType};
use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;
use super::comm::Rules;
use super::entries::Entries;

/// One key of a push: its internal id and where its values (in argument order) sit in the
/// plan's `values`.
pub(crate) struct PushGroup {
    pub id: i32,
    pub values: Range<usize>,
    /// The key's place among the store's entries ([`Entries::find`]).
    pub place: u32,
}

/// A checked push: every pushed value, grouped by key, and the keys.
pub(crate) struct PushPlan {
    pub values: Arc<Vec<NDArray>>,
    pub groups: Vec<PushGroup>,
}

/// Items grouped by id: `items` reordered so that each id's items are contiguous, ids in
/// ascending order and argument order kept within an id; `runs` gives each id's range. One
/// vector for all groups: a call may carry thousands of keys, and a vector per key would
/// cost an allocation each, here and again where the workers free it.
pub(crate) struct Grouped<T> {
    pub items: Arc<Vec<T>>,
    pub runs: Vec<(i32, Range<usize>)>,
}

/// How many runs of equal ids `ids` has, if they are in ascending order.
fn sorted_runs(ids: &[i32]) -> Option<usize> {
    let (mut sorted, mut starts) = (true, 0);
    for w in ids.windows(2) {
        sorted &= w[0] <= w[1];
        starts += usize::from(w[0] != w[1]);
    }
    sorted.then(|| starts + usize::from(!ids.is_empty()))
}

/// The runs of equal ids in `sorted_ids`, which has `count` of them (counted first: grown by
/// doubling, a vector of thousands of runs would be copied a dozen times).
fn runs_of(sorted_ids: &[i32], count: usize) -> Vec<(i32, Range<usize>)> {
    let mut runs = Vec::with_capacity(count);
    let mut start = 0;
    for run in sorted_ids.chunk_by(|a, b| a == b) {
        runs.push((run[0], start..start + run.len()));
        start += run.len();
    }
    runs
}

/// Groups `(id, item)` pairs by id; see [`Grouped`]. Takes the items shared and keeps them so
/// where their keys are in order: cloning arrays costs refcount traffic with the workers, and
/// a call repeating an earlier call's handles shares that call's arrays (`ffi::handle`).
pub(crate) fn group<T: Clone>(ids: &[i32], items: Arc<Vec<T>>) -> Grouped<T> {
    if let Some(count) = sorted_runs(ids) {
        // The usual call lists keys in order: nothing moves.
        return Grouped { runs: runs_of(ids, count), items };
    }
    // Sort positions, not the items themselves (arrays are several words each).
    let mut order: Vec<usize> = (0..items.len()).collect();
    order.sort_by_key(|&i| ids[i]); // stable: argument order within a key
    let mut slots: Vec<Option<T>> = Arc::unwrap_or_clone(items).into_iter().map(Some).collect();
    // `order` is a permutation: every slot is still full when its turn comes.
    let items: Vec<T> = order.iter().filter_map(|&i| slots[i].take()).collect();
    let sorted_ids: Vec<i32> = order.iter().map(|&i| ids[i]).collect();
    let count = sorted_runs(&sorted_ids).unwrap_or(sorted_ids.len());
    Grouped { runs: runs_of(&sorted_ids, count), items: Arc::new(items) }
}

/// Fails unless `other` (a pushed value or an output) has the stored value's shape.
/// `shown` is called only to word a failure: every value of every call passes here.
///
/// Inlined, its message made apart: a call per value (8,000 in a `small` call) spilled its
/// arguments for a comparison of a few words.
#[inline(always)]
fn check_shape(shown: &dyn Fn(i32) -> String, id: i32, stored: &NDArray, other: &NDArray, what: &str) -> Result<()> {
    // Element by element rather than slice equality: shapes are a few words, and a libc
    // memcmp call per value is measurable on calls with thousands of values.
    let (a, b) = (stored.shape(), other.shape());
    if a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y) {
        return Ok(());
    }
    Err(shape_mismatch(shown, id, a, b, what))
}

#[cold]
#[inline(never)]
fn shape_mismatch(shown: &dyn Fn(i32) -> String, id: i32, a: &[usize], b: &[usize], what: &str) -> crate::Error {
    crate::Error::new(format!(
        "shape mismatch for key {}: the stored value has shape {}, the {what} {}",
        shown(id),
        shape_string(a),
        shape_string(b)
    ))
}

/// The message for a key that was never initialised.
pub(crate) fn not_inited(shown: &str) -> crate::Error {
    crate::Error::new(format!("key {shown} has not been inited"))
}

/// Checks a push: every key initialised, every value dense with the stored shape and dtype.
pub(crate) fn plan_push(
    entries: &Entries,
    ids: &[i32],
    shown: &dyn Fn(i32) -> String,
    values: Arc<Vec<NDArray>>,
) -> Result<PushPlan> {
    let Grouped { items: values, runs } = group(ids, values);
    let mut groups = Vec::with_capacity(runs.len());
    let mut next_place = 0;
    for (id, range) in runs {
        let (place, entry) = entries.find_near(&id, next_place).ok_or_else(|| not_inited(&shown(id)))?;
        next_place = place.wrapping_add(1);
        let stored = &entry.stored;
        let vals = &values[range.clone()];
        for v in vals {
            match v.stype() {
                StorageType::Default | StorageType::RowSparse => {}
                other => crate::bail!(
                    "Unexpected storage type detected during kvstore push: {} (key {})",
                    other.name(),
                    shown(id)
                ),
            }
            check_shape(shown, id, stored, v, "pushed value")?;
            v.check_row_sparse()?;
            crate::ensure!(
                v.dtype() == stored.dtype(),
                "dtype mismatch for key {}: the stored value is {}, the pushed value {}",
                shown(id),
                stored.dtype().name(),
                v.dtype().name()
            );
        }
        // MXNet's reductions have no bool kernel (they fail later with "Unknown type enum 7");
        // refuse up front instead of leaving a poisoned value.
        crate::ensure!(
            vals.len() == 1 || stored.dtype() != crate::ndarray::DType::Bool,
            "key {}: summing {} bool values is not supported (MXNet has no bool reduction)",
            shown(id),
            vals.len()
        );
        groups.push(PushGroup { id, values: range, place });
    }
    Ok(PushPlan { values, groups })
}

/// Checks that a compressed push only carries float32 values, as MXNet requires.
pub(crate) fn check_compressible(
    compression: Option<crate::backend::GradientCompression>,
    entries: &Entries,
    plan: &PushPlan,
    shown: &dyn Fn(i32) -> String,
) -> Result<()> {
    if compression.is_none() {
        return Ok(());
    }
    for g in &plan.groups {
        let stored = &entries.at(g.place).ok_or_else(|| not_inited(&shown(g.id)))?.stored;
        crate::ensure!(
            plan.values[g.values.clone()].iter().all(|v| v.stype() == StorageType::Default),
            "gradient compression does not support row_sparse values (key {})",
            shown(g.id)
        );
        crate::ensure!(
            stored.dtype() == crate::ndarray::DType::Float32,
            "Gradient compression is only supported for float32 type of parameters (key {} is {})",
            shown(g.id),
            stored.dtype().name()
        );
    }
    Ok(())
}

/// A checked pull: the outputs, grouped by key, and one copy per key from the stored value
/// into its outputs.
pub(crate) struct PullPlan {
    pub outs: Arc<Vec<NDArray>>,
    pub copies: Vec<CopyJob>,
    /// Each copy's key.
    pub ids: Vec<i32>,
}

/// Stored values a loop over keys asks for ahead of cloning them (see [`plan_pull`]).
pub(crate) const STORED_AHEAD: usize = 8;

/// Checks a pull and returns the copies to make. Sparse outputs are skipped when
/// `ignore_sparse`, before the key is checked, as in MXNet. `ahead` is told each key a few
/// keys before `lookup` is asked for its stored value: the clone's locked increment is on a
/// line the op that last held the value released on another core, and asking for the lines
/// ahead overlaps those misses instead of taking them one at a time.
pub(crate) fn plan_pull(
    lookup: &dyn Fn(i32) -> Option<NDArray>,
    ahead: &dyn Fn(i32),
    ids: &[i32],
    shown: &dyn Fn(i32) -> String,
    outs: Arc<Vec<NDArray>>,
    ignore_sparse: bool,
) -> Result<PullPlan> {
    // Planned in one pass over the outputs (thousands of arrays in a call of small keys, each
    // a cache miss on its first touch); only a call with a skipped output is planned again
    // without those.
    let grouped = group(ids, outs);
    if let Some(copies) = copies_of(lookup, ahead, &grouped, shown, ignore_sparse)? {
        return Ok(copies);
    }
    // Only `ignore_sparse` skips outputs: the sparse ones are left out.
    let (ids, outs): (Vec<i32>, Vec<NDArray>) = grouped
        .runs
        .iter()
        .flat_map(|(id, range)| grouped.items[range.clone()].iter().filter(|o| !is_sparse(o)).map(move |o| (*id, o.clone())))
        .unzip();
    copies_of(lookup, ahead, &group(&ids, Arc::new(outs)), shown, false)?
        .ok_or_else(|| crate::Error::new("internal error: a pull's plan skipped an output it had left out"))
}

/// Points each copy of `plan`, planned before a push in the same call, at its key's stored
/// value as that push left it: a push may give a key a new stored value (of the sum's storage
/// type, or on the sum's GPU for an updater), and the pull reads what the push leaves, as
/// MXNet's pull after its push does.
pub(crate) fn read_stored_after_push(entries: &Entries, plan: &mut PullPlan) {
    for (copy, id) in plan.copies.iter_mut().zip(&plan.ids) {
        if let Some(entry) = entries.get(id) {
            if !entry.stored.same_chunk(&copy.src) {
                copy.src = entry.stored.clone();
            }
        }
    }
}

/// Whether `out` is sparse: a pull with `ignore_sparse` leaves it alone.
fn is_sparse(out: &NDArray) -> bool {
    out.stype() != StorageType::Default
}

/// [`plan_pull`]'s copies of `grouped`, or `None` as soon as a key has an output it skips
/// with `ignore_sparse` (before that key is checked: MXNet skips them first).
fn copies_of(
    lookup: &dyn Fn(i32) -> Option<NDArray>,
    ahead: &dyn Fn(i32),
    grouped: &Grouped<NDArray>,
    shown: &dyn Fn(i32) -> String,
    ignore_sparse: bool,
) -> Result<Option<PullPlan>> {
    let Grouped { items: outs, runs } = grouped;
    let mut copies = Vec::with_capacity(runs.len());
    let mut copy_ids = Vec::with_capacity(runs.len());
    for (i, (id, range)) in runs.iter().cloned().enumerate() {
        if let Some((next, _)) = runs.get(i + STORED_AHEAD) {
            ahead(*next);
        }
        let outs = &outs[range.clone()];
        if ignore_sparse && outs.iter().any(is_sparse) {
            return Ok(None);
        }
        let stored = lookup(id).ok_or_else(|| not_inited(&shown(id)))?;
        for out in outs {
            crate::ensure!(
                out.stype() != StorageType::Csr,
                "pulling key {} into a csr output is not supported",
                shown(id)
            );
            check_shape(shown, id, &stored, out, "output")?;
        }
        // One job per key: the stored value is read once for all of its outputs.
        copies.push(CopyJob { src: stored, dsts: range });
        copy_ids.push(id);
    }
    Ok(Some(PullPlan { outs: Arc::clone(outs), copies, ids: copy_ids }))
}

/// Checks a row_sparse pull and returns the `(stored, output, row ids)` to schedule, with
/// MXNet's messages.
pub(crate) fn plan_row_sparse_pull(
    entries: &Entries,
    ids: &[i32],
    shown: &dyn Fn(i32) -> String,
    outs: &[NDArray],
    row_ids: &[NDArray],
) -> Result<Vec<(NDArray, NDArray, NDArray)>> {
    let mut plan = Vec::with_capacity(ids.len());
    for ((&id, out), rid) in ids.iter().zip(outs).zip(row_ids) {
        crate::ensure!(
            out.stype() == StorageType::RowSparse,
            "Expected row_sparse storage type for row_sparse_pull values, but detected storage type {}",
            out.stype().name()
        );
        crate::ensure!(
            rid.stype() == StorageType::Default,
            "Expected default storage type for row_sparse_pull rowids, but detected storage type {}",
            rid.stype().name()
        );
        let stored = &entries.get(&id).ok_or_else(|| not_inited(&shown(id)))?.stored;
        crate::ensure!(
            stored.stype() == StorageType::RowSparse,
            "PullRowSparse expects row_sparse src NDArray (key {} is {})",
            shown(id),
            stored.stype().name()
        );
        check_shape(shown, id, stored, out, "output")?;
        check_requested_rows(shown, id, stored, rid)?;
        plan.push((stored.clone(), out.clone(), rid.clone()));
    }
    Ok(plan)
}

/// Fails unless every row id asked for names a row of the stored value: MXNet's
/// sparse_retain reads out of bounds (or returns an id the array does not have) otherwise.
/// Waits for pending writes to the row ids.
fn check_requested_rows(shown: &dyn Fn(i32) -> String, id: i32, stored: &NDArray, rid: &NDArray) -> Result<()> {
    let rows = stored.shape().first().copied().unwrap_or(0);
    let rid = &rid.readable_on_host()?;
    let ids = crate::engine::engine().run_sync(&[rid.var()], &[], || rid.read_bytes(|b| crate::ndarray::row_ids_of(rid.dtype(), b, rid.size())))??;
    match ids.iter().find(|&&r| usize::try_from(r).map_or(true, |r| r >= rows)) {
        Some(bad) => crate::bail!("row id {bad} is out of range for key {}: the stored value has {rows} rows", shown(id)),
        None => Ok(()),
    }
}

/// Checks an init: new keys, distinct within the call, dense values.
pub(crate) fn plan_init(
    entries: &Entries,
    ids: &[i32],
    shown: &dyn Fn(i32) -> String,
    values: &[NDArray],
) -> Result<Vec<(i32, NDArray)>> {
    let mut seen = std::collections::HashSet::new();
    let mut plan = Vec::with_capacity(ids.len());
    for (&id, v) in ids.iter().zip(values) {
        crate::ensure!(
            !entries.contains_key(&id) && seen.insert(id),
            "duplicate init of key {}. Please double check if you called kv.init or kv.broadcast with this key multiple times",
            shown(id)
        );
        crate::ensure!(
            v.stype() != StorageType::Csr,
            "initialising key {} with a csr value is not supported",
            shown(id)
        );
        v.check_row_sparse()?;
        plan.push((id, v.clone()));
    }
    Ok(plan)
}

/// An empty array for each key of a checked init, with the value's storage type, shape and
/// dtype, by key: what a broadcast copies its values into. A map, not a list: the broadcast's
/// pull looks every output key up here, and a linear search made a broadcast of `n` keys cost
/// `n²` (80k keys: 9× an Init and a Pull).
pub(crate) fn new_stored_values(inits: &[(i32, NDArray)], ctx: Context) -> Result<HashMap<i32, NDArray>> {
    let mut stored = HashMap::with_capacity(inits.len());
    for (id, v) in inits {
        let empty = match v.stype() {
            StorageType::RowSparse => NDArray::empty_row_sparse(v.shape(), ctx, v.dtype())?,
            _ => NDArray::zeros(v.shape(), ctx, v.dtype())?,
        };
        stored.insert(*id, empty);
    }
    Ok(stored)
}

// ---- The comm's rules (see `comm::Rules`), checked with the rest of a call's plan ----

/// An init's rules: row_sparse values with rows of at least one element.
pub(crate) fn check_init_rules(rules: &Rules, plan: &[(i32, NDArray)], shown: &dyn Fn(i32) -> String) -> Result<()> {
    if rules.row_sparse_needs_rows {
        for (id, v) in plan {
            crate::ensure!(
                v.stype() != StorageType::RowSparse || (v.shape().len() >= 2 && v.row_len() > 0),
                "key {}: a row_sparse value needs rows of at least one element",
                shown(*id)
            );
        }
    }
    Ok(())
}

/// A push's rules: values of the key's storage type, where the comm keeps it.
pub(crate) fn check_push_rules(rules: &Rules, entries: &Entries, plan: &PushPlan, shown: &dyn Fn(i32) -> String) -> Result<()> {
    if !rules.push_keeps_storage_type {
        return Ok(());
    }
    for g in &plan.groups {
        let stored = &entries.at(g.place).ok_or_else(|| not_inited(&shown(g.id)))?.stored;
        let sparse_key = stored.stype() == StorageType::RowSparse;
        for v in &plan.values[g.values.clone()] {
            crate::ensure!(
                v.stype() == stored.stype(),
                "key {}: push of a {} value to a {} key is not supported by distributed stores{}",
                shown(g.id),
                v.stype().name(),
                stored.stype().name(),
                if sparse_key { " (row_sparse keys take row_sparse pushes and PullRowSparse)" } else { "" }
            );
        }
    }
    Ok(())
}

/// A pull's rules: dense keys only, where the comm reads row_sparse keys by rows only.
pub(crate) fn check_pull_rules(rules: &Rules, pull: &PullPlan, shown: &dyn Fn(i32) -> String) -> Result<()> {
    if rules.pull_dense_keys_only {
        for (id, copy) in pull.ids.iter().zip(&pull.copies) {
            crate::ensure!(
                copy.src.stype() == StorageType::Default,
                "key {}: row_sparse keys of distributed stores are read with PullRowSparse (pull is not supported for them)",
                shown(*id)
            );
        }
    }
    Ok(())
}

/// A push-pull's rules: the same keys pushed and pulled, outputs of the stored dtype.
pub(crate) fn check_push_pull_rules(rules: &Rules, entries: &Entries, push: &PushPlan, pull: &PullPlan, shown: &dyn Fn(i32) -> String) -> Result<()> {
    if !rules.push_pull_same_keys {
        return Ok(());
    }
    crate::ensure!(
        push.groups.iter().map(|g| g.id).eq(pull.ids.iter().copied()),
        "List of push and pull keys are different: push-pull needs the same keys in both lists"
    );
    for (id, copy) in pull.ids.iter().zip(&pull.copies) {
        let dtype = entries.get(id).ok_or_else(|| not_inited(&shown(*id)))?.stored.dtype();
        crate::ensure!(
            pull.outs[copy.dsts.clone()].iter().all(|o| o.dtype() == dtype),
            "Output buffer dtype is different (key {})",
            shown(*id)
        );
    }
    Ok(())
}

/// A row_sparse pull's rules: each key once.
pub(crate) fn check_row_sparse_pull_rules(rules: &Rules, ids: &[i32], shown: &dyn Fn(i32) -> String) -> Result<()> {
    if rules.row_sparse_pull_once_per_key {
        let mut seen = std::collections::HashSet::new();
        for id in ids {
            crate::ensure!(seen.insert(*id), "RowSparsePull with multiple values is not supported yet (key {} appears twice)", shown(*id));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_are_in_ascending_key_order_and_keep_argument_order() {
        let g = group(&[7, 3, 7, 5, 3], Arc::new(vec!["a", "b", "c", "d", "e"]));
        assert_eq!(*g.items, vec!["b", "e", "d", "a", "c"]);
        assert_eq!(g.runs, vec![(3, 0..2), (5, 2..3), (7, 3..5)]);
        let items = Arc::new(vec![10, 11, 20, 40, 41, 42]);
        let sorted = group(&[1, 1, 2, 4, 4, 4], Arc::clone(&items));
        assert!(Arc::ptr_eq(&sorted.items, &items), "keys in order: the shared items are kept, not copied");
        assert_eq!(sorted.runs, vec![(1, 0..2), (2, 2..3), (4, 3..6)]);
        let empty = group::<u8>(&[], Arc::new(vec![]));
        assert!(empty.items.is_empty() && empty.runs.is_empty());
        for g in [&g.runs, &sorted.runs] {
            assert_eq!(g.capacity(), g.len(), "runs are counted, not grown");
        }
    }

    #[test]
    fn a_pull_skips_sparse_outputs_before_checking_their_keys_and_plans_the_rest() {
        use crate::ndarray::{Context, DType};
        let dense = || NDArray::zeros(&[2], Context::cpu(0), DType::Float32).unwrap();
        let sparse = || NDArray::empty_row_sparse(&[2], Context::cpu(0), DType::Float32).unwrap();
        let stored: HashMap<i32, NDArray> = [(1, dense()), (3, dense())].into_iter().collect();
        let lookup = |id: i32| stored.get(&id).cloned();
        let shown = |id: i32| id.to_string();
        let (d1, d3) = (dense(), dense());
        let outs = Arc::new(vec![d1.clone(), sparse(), d3.clone(), sparse()]);
        // Key 2 was never initialised: its only output is sparse, so it is never checked.
        let plan = plan_pull(&lookup, &|_| (), &[1, 2, 3, 1], &shown, Arc::clone(&outs), true).unwrap();
        assert_eq!(plan.ids, vec![1, 3]);
        assert_eq!(plan.copies.iter().map(|c| c.dsts.clone()).collect::<Vec<_>>(), vec![0..1, 1..2]);
        assert_eq!(plan.outs.len(), 2);
        assert!(plan.outs[0].var() == d1.var() && plan.outs[1].var() == d3.var(), "the dense outputs, in key order");
        let err = plan_pull(&lookup, &|_| (), &[1, 2, 3, 1], &shown, outs, false).err().map(|e| e.to_string());
        assert!(err.is_some_and(|e| e.contains("key 2 has not been inited")), "without ignore_sparse every key is checked");
        let all_dense = Arc::new(vec![d3.clone(), d1.clone()]);
        let plan = plan_pull(&lookup, &|_| (), &[1, 3], &shown, Arc::clone(&all_dense), true).unwrap();
        assert!(Arc::ptr_eq(&plan.outs, &all_dense), "nothing skipped: the call's outputs are kept, not copied");
        assert_eq!(plan.ids, vec![1, 3]);
    }

    #[test]
    fn runs_are_counted_only_for_ids_in_order() {
        assert_eq!(sorted_runs(&[]), Some(0));
        assert_eq!(sorted_runs(&[5]), Some(1));
        assert_eq!(sorted_runs(&[1, 1, 2, 4, 4, 4]), Some(3));
        assert_eq!(sorted_runs(&[-3, 0, 7, 9]), Some(4));
        assert_eq!(sorted_runs(&[1, 2, 2, 1]), None);
        assert_eq!(sorted_runs(&[2, 1]), None);
    }
}
