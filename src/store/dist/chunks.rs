//! The sync round of one dense key's part on a server, when workers push the part in chunks
//! (`wire::Msg::Push`'s `chunk`): each chunk has a round of its own (`round::Round`, summed in
//! worker-rank order, so every element's sum is the same bits as when the part is pushed
//! whole), and the part's round ends when every chunk's has. A server without an updater
//! answers each chunk as its round completes (the chunk's pushes, and the pulls waiting for
//! the round get that chunk of the value), so the answers of a big part stream out while its
//! later chunks are still arriving: push and pull overlap on the full-duplex link. With an
//! updater (which may not be elementwise: LAMB's norms) the part is updated and answered whole
//! once every chunk is in. A part pushed whole is a round of one chunk.

use super::round::{Request, Round, SumOrder};
use crate::error::Result;

/// How a part's round answers its chunks (decided when its first chunk completes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answering {
    /// Each chunk as its round completes: the round's sum is the new value (no updater).
    Streamed,
    /// Every request once the whole part has been updated.
    Whole,
}

/// The round of a part in progress.
pub struct PartRound {
    workers: usize,
    order: SumOrder,
    /// The part's elements.
    len: usize,
    /// Elements per chunk (`len` when pushed whole), fixed by the round's first push.
    chunk: usize,
    chunks: Vec<Round<Vec<u8>>>,
    /// Which chunks' rounds have completed.
    done: Vec<bool>,
    /// Which workers have pushed some chunk in this round.
    pushed: Vec<bool>,
    /// Requests of completed chunks, kept for the whole part's answer (`Answering::Whole`).
    kept: Vec<Request>,
    /// Pulls waiting for this round (`PullAfter`).
    pulls: Vec<Request>,
    answering: Option<Answering>,
}

impl PartRound {
    /// An empty round of a part of `len` elements, pushed by `workers` workers.
    pub fn new(workers: usize, order: SumOrder, len: usize) -> PartRound {
        PartRound {
            workers,
            order,
            len,
            chunk: len.max(1),
            chunks: vec![Round::new(workers, order)],
            done: vec![false],
            pushed: vec![false; workers],
            kept: Vec::new(),
            pulls: Vec::new(),
            answering: None,
        }
    }

    /// No push has arrived in this round.
    pub fn is_empty(&self) -> bool {
        !self.pushed.iter().any(|&p| p)
    }

    /// The chunk that `n` elements at element `at` belong to, for a part pushed in chunks of
    /// `chunk` elements (0: whole). The round's first push sets the chunk size; a push of
    /// another size in the same round is refused (every worker chunks alike).
    pub fn chunk_of(&mut self, at: usize, n: usize, chunk: usize) -> Result<usize> {
        let chunk = if chunk == 0 { self.len.max(1) } else { chunk };
        if self.is_empty() && chunk != self.chunk {
            let count = self.len.div_ceil(chunk).max(1);
            self.chunk = chunk;
            self.chunks = (0..count).map(|_| Round::new(self.workers, self.order)).collect();
            self.done = vec![false; count];
        }
        crate::ensure!(
            chunk == self.chunk,
            "a push in chunks of {chunk} elements in a sync round pushed in chunks of {}: every worker must push a key alike",
            self.chunk
        );
        let index = at / chunk;
        crate::ensure!(
            at.is_multiple_of(chunk) && index < self.chunks.len() && n == self.span(index).1,
            "a push of {n} elements at element {at} is not a chunk of {chunk} elements of a {}-element part",
            self.len
        );
        Ok(index)
    }

    /// The elements `(first, count)` of chunk `index`.
    pub fn span(&self, index: usize) -> (usize, usize) {
        let first = index * self.chunk;
        (first, self.chunk.min(self.len - first.min(self.len)))
    }

    /// Whether the part is pushed in more than one chunk this round.
    pub fn chunked(&self) -> bool {
        self.chunks.len() > 1
    }

    /// Records worker `rank`'s push of chunk `index` (see `Round::arrive`): `Ok(true)`: fold
    /// it now; `Ok(false)`: hand it to [`PartRound::hold`].
    pub fn arrive(&mut self, index: usize, rank: usize, request: Request, joined: &[bool]) -> Result<bool> {
        crate::ensure!(!self.done[index], "worker {rank} pushed twice in one sync round (its second push is refused)");
        let now = self.chunks[index].arrive(rank, request, joined)?;
        self.pushed[rank] = true;
        Ok(now)
    }

    /// Records the paired push of workers 0 and 1 of chunk `index` (see `Round::arrive_pair`).
    pub fn arrive_pair(&mut self, index: usize, request: Request) -> Result<bool> {
        crate::ensure!(!self.done[index], "workers 0 and 1 pushed twice in one sync round (their second push is refused)");
        let now = self.chunks[index].arrive_pair(request)?;
        self.pushed[0] = true;
        self.pushed[1] = true;
        Ok(now)
    }

    /// Keeps an early value of chunk `index` until the ranks before it have been folded.
    pub fn hold(&mut self, index: usize, rank: usize, value: Vec<u8>) {
        self.chunks[index].hold(rank, value)
    }

    /// The held values of chunk `index` that can be folded now, in rank order.
    pub fn ready(&mut self, index: usize, joined: &[bool]) -> Vec<Vec<u8>> {
        self.chunks[index].ready(joined)
    }

    /// Whether the next value folded into chunk `index` is its round's first (copied).
    pub fn start_fold(&mut self, index: usize) -> bool {
        self.chunks[index].start_fold()
    }

    /// How many chunks the part has this round.
    pub fn count(&self) -> usize {
        self.chunks.len()
    }

    /// Once every worker has pushed chunk `index` (or joined) and its values are folded: ends
    /// that chunk's round and returns its requests; `None` while it waits (or has ended).
    pub fn complete_chunk(&mut self, index: usize, joined: &[bool]) -> Option<Vec<Request>> {
        if self.done[index] || !self.chunks[index].complete(joined) {
            return None;
        }
        self.done[index] = true;
        Some(self.chunks[index].finish())
    }

    /// How the round answers (see [`Answering`]), decided at its first completed chunk by
    /// `streamed` (whether a completed chunk's sum is final then: no updater, no
    /// multi-precision copy to refresh, and more than one chunk).
    pub fn answering(&mut self, streamed: impl FnOnce() -> bool) -> Answering {
        *self.answering.get_or_insert_with(|| if streamed() && self.chunks.len() > 1 { Answering::Streamed } else { Answering::Whole })
    }

    /// How the round answers, once decided.
    pub fn decided(&self) -> Option<Answering> {
        self.answering
    }

    /// Keeps a completed chunk's requests for the whole part's answer.
    pub fn keep(&mut self, requests: Vec<Request>) {
        self.kept.extend(requests);
    }

    /// Whether worker `rank` has pushed in this (open) round.
    pub fn has_pushed(&self, rank: usize) -> bool {
        self.pushed.get(rank).copied().unwrap_or(false)
    }

    /// The chunks whose rounds have completed, by index.
    pub fn completed(&self) -> Vec<usize> {
        self.done.iter().enumerate().filter(|(_, &d)| d).map(|(i, _)| i).collect()
    }

    /// Answers `pull` as the round goes on (its puller has pushed in it).
    pub fn defer_pull(&mut self, pull: Request) {
        self.pulls.push(Request { pull: true, ..pull });
    }

    /// The pulls waiting for this round.
    pub fn pulls(&self) -> &[Request] {
        &self.pulls
    }

    /// Every chunk's round has completed.
    pub fn complete(&self) -> bool {
        self.done.iter().all(|&d| d)
    }

    /// Ends the part's round: the kept requests, then the deferred pulls; the round is empty
    /// again (its chunk size is set afresh by the next round's first push).
    pub fn finish(&mut self) -> Vec<Request> {
        self.pushed.iter_mut().for_each(|p| *p = false);
        self.done.iter_mut().for_each(|d| *d = false);
        self.answering = None;
        let mut out = std::mem::take(&mut self.kept);
        out.append(&mut self.pulls);
        out
    }

    /// The worker ranks the open round waits for (that have neither joined nor pushed some
    /// chunk whose round is open: a worker part-way through its chunks owes the rest), and
    /// how many workers have pushed.
    pub fn missing(&self, joined: &[bool]) -> (Vec<usize>, usize) {
        if self.is_empty() {
            return (Vec::new(), 0);
        }
        let open: Vec<&Round<Vec<u8>>> = self.chunks.iter().zip(&self.done).filter(|(_, &d)| !d).map(|(c, _)| c).collect();
        let missing = (0..self.workers).filter(|&r| !joined[r] && open.iter().any(|c| !c.has_pushed(r))).collect();
        (missing, self.pushed.iter().filter(|&&p| p).count())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(source: usize, req: u64) -> Request {
        Request { source, req, want_value: false, pull: false, chunk: None, relay: false }
    }

    #[test]
    fn chunks_cover_the_part_and_the_last_takes_the_rest() {
        let mut round = PartRound::new(2, SumOrder::Rank, 10);
        assert_eq!(round.chunk_of(8, 2, 4).unwrap(), 2);
        assert_eq!((round.count(), round.span(0), round.span(2)), (3, (0, 4), (8, 2)));
        assert!(round.chunk_of(4, 3, 4).is_err(), "a chunk of the wrong length");
        assert!(round.chunk_of(2, 4, 4).is_err(), "a chunk off the boundaries");
        assert!(round.chunk_of(12, 4, 4).is_err(), "a chunk past the part");
        // Once a push has arrived, the round's chunk size is fixed.
        assert!(round.arrive(0, 0, request(0, 1), &[false; 2]).unwrap());
        assert!(round.chunk_of(0, 10, 0).is_err(), "a whole push in a chunked round");
        // A whole push is one chunk.
        let mut whole = PartRound::new(2, SumOrder::Rank, 10);
        assert_eq!((whole.chunk_of(0, 10, 0).unwrap(), whole.count(), whole.chunked()), (0, 1, false));
    }

    #[test]
    fn the_part_completes_when_every_chunk_has() {
        let none = [false; 2];
        let mut round = PartRound::new(2, SumOrder::Rank, 8);
        for (rank, at) in [(0, 0), (0, 4), (1, 4)] {
            let i = round.chunk_of(at, 4, 4).unwrap();
            assert!(round.arrive(i, rank, request(rank, at as u64), &none).unwrap());
        }
        assert_eq!(round.complete_chunk(0, &none), None, "worker 1 has not pushed chunk 0");
        assert_eq!(round.complete_chunk(1, &none).map(|r| r.len()), Some(2));
        assert_eq!(round.complete_chunk(1, &none), None, "a chunk completes once");
        assert_eq!(round.completed(), vec![1]);
        assert!(!round.complete());
        assert_eq!(round.missing(&none), (vec![1], 2), "worker 1 owes chunk 0");
        // A second push of a completed chunk in the same round is refused.
        assert!(round.arrive(1, 1, request(1, 9), &none).is_err());
        assert!(round.arrive(0, 1, request(1, 0), &none).unwrap());
        round.defer_pull(request(1, 7));
        assert_eq!(round.answering(|| true), Answering::Streamed);
        assert_eq!(round.answering(|| false), Answering::Streamed, "decided once per round");
        assert_eq!(round.complete_chunk(0, &none).map(|r| r.len()), Some(2));
        assert!(round.complete());
        let rest = round.finish();
        assert_eq!(rest.iter().map(|r| (r.req, r.pull)).collect::<Vec<_>>(), vec![(7, true)]);
        assert!(round.is_empty() && round.decided().is_none() && round.completed().is_empty());
    }

    #[test]
    fn a_whole_part_is_answered_whole() {
        let mut round = PartRound::new(1, SumOrder::Rank, 8);
        round.chunk_of(0, 8, 0).unwrap();
        assert!(round.arrive(0, 0, request(0, 1), &[false]).unwrap());
        assert_eq!(round.answering(|| true), Answering::Whole, "one chunk: nothing to stream");
        let done = round.complete_chunk(0, &[false]).unwrap();
        round.keep(done);
        assert_eq!(round.finish().len(), 1);
    }

    #[test]
    fn chunks_are_folded_in_rank_order_each() {
        // Three workers: a chunk's value from rank 2 before rank 1's is held for that chunk
        // only; the other chunk folds as it arrives.
        let none = [false; 3];
        let mut round = PartRound::new(3, SumOrder::Rank, 4);
        let (c0, c1) = (round.chunk_of(0, 2, 2).unwrap(), round.chunk_of(2, 2, 2).unwrap());
        assert!(round.arrive(c0, 0, request(0, 0), &none).unwrap());
        assert!(!round.arrive(c0, 2, request(2, 0), &none).unwrap());
        round.hold(c0, 2, vec![2]);
        assert!(round.arrive(c1, 0, request(0, 1), &none).unwrap());
        assert!(round.ready(c0, &none).is_empty());
        assert!(round.arrive(c0, 1, request(1, 0), &none).unwrap());
        assert_eq!(round.ready(c0, &none), vec![vec![2]]);
        assert!(round.complete_chunk(c0, &none).is_some());
        assert!(round.complete_chunk(c1, &none).is_none());
        assert_eq!(round.missing(&none), (vec![1, 2], 3));
        // A join releases what the round waited for from that worker.
        assert!(round.arrive(c1, 1, request(1, 1), &none).unwrap());
        assert!(round.complete_chunk(c1, &[false, false, true]).is_some());
        assert!(round.complete());
    }
}
