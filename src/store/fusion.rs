//! A pull queued right behind the push of a key: its outputs are handed to the push's sum, which
//! writes them while it writes the stored value, instead of a copy op that reads the stored
//! value back from memory afterwards (for a big key, one pass over memory fewer). On a GPU
//! the sum's op copies into the outputs right after its kernels, on the same stream: no second
//! op waits for the first one's completion to be dispatched.
//!
//! The push leaves each dense sum it schedules joinable ([`Joinable`]) where its backend says a
//! pull of the key's size should join (`BackendKind::joins_pull`); a pull of the key joins it
//! when the engine lets the sum's op take over the outputs (the op has not started, nothing is
//! pending on the outputs: `Engine::try_extend`). What the pull's outputs then hold, and when
//! later ops on them run, is what the copy op would have given.

use super::entries::Entries;
use super::plan::PullPlan;
use crate::backend::{BackendKind, PullTail};
use crate::engine::{engine, Ticket};
use crate::ndarray::{NDArray, StorageType};
use std::sync::Arc;

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

/// A tail for the sum of `values` into `dst` when a pull could join it: a dense sum whose
/// arrays are all in host memory (a big one), or all on GPUs.
pub(super) fn tail_for(values: &[NDArray], dst: &NDArray) -> Option<Arc<PullTail>> {
    let kind = BackendKind::of(dst.ctx());
    let dense_of_kind = |a: &NDArray| a.stype() == StorageType::Default && BackendKind::of(a.ctx()) == kind;
    let joinable = kind.joins_pull(dst.data_byte_len()) && dense_of_kind(dst) && values.iter().all(dense_of_kind);
    joinable.then(Arc::default)
}

/// Hands every copy of `plan` whose key has a joinable sum to that sum, and removes it from the
/// plan. A copy joins only into outputs of the stored value's dtype and size, dense, in host
/// memory and distinct; otherwise it stays a copy.
pub(super) fn join(entries: &Entries, plan: &mut PullPlan) {
    let PullPlan { outs, copies, ids } = plan;
    let mut kept = 0;
    for i in 0..copies.len() {
        let src = &copies[i].src;
        let joined = BackendKind::of(src.ctx()).joins_pull(src.data_byte_len()) && entries.get(&ids[i]).and_then(|e| e.joinable.as_ref()).is_some_and(|j| {
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

/// Whether the sum's op can write `dsts` as copies of `src`: in host memory, or on the sum's
/// own GPU (its stream orders the copies after the kernels).
fn fits(src: &NDArray, dsts: &[NDArray]) -> bool {
    let like_src = |d: &NDArray| {
        d.stype() == StorageType::Default
            && d.dtype() == src.dtype()
            && d.data_byte_len() == src.data_byte_len()
            && BackendKind::of(d.ctx()) == BackendKind::of(src.ctx())
            && (BackendKind::of(d.ctx()) == BackendKind::Host || d.ctx() == src.ctx())
            && !d.same_chunk(src)
    };
    dsts.iter().enumerate().all(|(i, d)| like_src(d) && dsts[..i].iter().all(|e| !e.same_chunk(d)))
}
