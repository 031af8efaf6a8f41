//! A pull queued right behind the push of a key: its outputs are handed to the push's sum, which
//! writes them while it writes the stored value, instead of a copy op that reads the stored
//! value back from memory afterwards (for a big key, one pass over memory fewer).
//!
//! The push leaves each big dense host sum it schedules joinable ([`Joinable`]); a pull of the
//! key joins it when the engine lets the sum's op take over the outputs (the op has not
//! started, nothing is pending on the outputs: `Engine::try_extend`). What the pull's outputs
//! then hold, and when later ops on them run, is what the copy op would have given.

use super::entries::Entries;
use super::plan::PullPlan;
use crate::backend::{BackendKind, PullTail};
use crate::engine::{engine, Ticket};
use crate::ndarray::{NDArray, StorageType};
use std::sync::Arc;

/// Sums smaller than this are not left joinable: their copies run batched with other keys',
/// where the stored value is still in cache.
const JOIN_MIN_BYTES: usize = 1 << 20;

/// A key's scheduled sum that a pull may join.
pub(super) struct Joinable {
    ticket: Ticket,
    tail: Arc<PullTail>,
}

impl Joinable {
    pub(super) fn new(ticket: Ticket, tail: Arc<PullTail>) -> Joinable {
        Joinable { ticket, tail }
    }

    /// The outputs handed to the sum and not yet taken by its op.
    #[cfg(test)]
    pub(super) fn handed(&self) -> usize {
        let outs = self.tail.take();
        let n = outs.len();
        self.tail.hand(outs);
        n
    }
}

/// A tail for the sum of `values` into `dst` when a pull could join it: a big dense sum whose
/// arrays are all in host memory.
pub(super) fn tail_for(values: &[NDArray], dst: &NDArray) -> Option<Arc<PullTail>> {
    let host_dense = |a: &NDArray| a.stype() == StorageType::Default && BackendKind::of(a.ctx()) == BackendKind::Host;
    let joinable = dst.data_byte_len() >= JOIN_MIN_BYTES && host_dense(dst) && values.iter().all(host_dense);
    joinable.then(Arc::default)
}

/// Hands every copy of `plan` whose key has a joinable sum to that sum, and removes it from the
/// plan. A copy joins only into outputs of the stored value's dtype and size, dense, in host
/// memory and distinct; otherwise it stays a copy.
pub(super) fn join(entries: &Entries, plan: &mut PullPlan) {
    let PullPlan { outs, copies, ids } = plan;
    let mut kept = 0;
    for i in 0..copies.len() {
        let big = copies[i].src.data_byte_len() >= JOIN_MIN_BYTES;
        let joined = big && entries.get(&ids[i]).and_then(|e| e.joinable.as_ref()).is_some_and(|j| {
            let (src, dsts) = (&copies[i].src, &outs[copies[i].dsts.clone()]);
            fits(src, dsts) && {
                let vars: Vec<_> = dsts.iter().map(|d| d.var()).collect();
                let detach = j.tail.take_back(src, dsts.to_vec());
                engine().try_extend(&j.ticket, &vars, || j.tail.hand(dsts.iter().cloned()), detach)
            }
        });
        if !joined {
            copies.swap(kept, i);
            ids.swap(kept, i);
            kept += 1;
        }
    }
    copies.truncate(kept);
    ids.truncate(kept);
}

/// Whether the sum's op can write `dsts` as copies of `src`.
fn fits(src: &NDArray, dsts: &[NDArray]) -> bool {
    let like_src = |d: &NDArray| {
        d.stype() == StorageType::Default
            && d.dtype() == src.dtype()
            && d.data_byte_len() == src.data_byte_len()
            && BackendKind::of(d.ctx()) == BackendKind::Host
            && !d.same_chunk(src)
    };
    dsts.iter().enumerate().all(|(i, d)| like_src(d) && dsts[..i].iter().all(|e| !e.same_chunk(d)))
}
