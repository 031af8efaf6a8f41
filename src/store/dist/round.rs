//! One sync round of a key on a server: the pushes of the round, folded into the round's sum
//! in worker-rank order whatever order they arrive in, so the sum's bits depend on the
//! values alone: `((w0 + w1) + w2) + ...` over the ranks that push in the round (a rank that
//! has joined, see `members`, contributes nothing). A push that arrives before a lower rank's
//! is held (at most one value per worker) until the ranks before it have been folded.
//! `KVSTORE_DIST_SUM_ORDER=arrival` folds each push as it arrives instead (ps-lite's order:
//! the sum then changes with network timing); `rank` (the default) is the order above.

use crate::error::Result;
use once_cell::sync::Lazy;

/// The order a sync round's pushes are summed in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SumOrder {
    /// Worker-rank order: the same bits every run.
    Rank,
    /// Arrival order (ps-lite's): no waiting, no held copies.
    Arrival,
}

static SUM_ORDER: Lazy<std::result::Result<SumOrder, String>> = Lazy::new(|| match std::env::var("KVSTORE_DIST_SUM_ORDER") {
    Err(_) => Ok(SumOrder::Rank),
    Ok(v) => match v.trim() {
        "" | "rank" => Ok(SumOrder::Rank),
        "arrival" => Ok(SumOrder::Arrival),
        other => Err(format!("KVSTORE_DIST_SUM_ORDER={other:?}: expected `rank` (the default) or `arrival`")),
    },
});

/// The order of this process's sync rounds (`KVSTORE_DIST_SUM_ORDER`, read once).
pub fn sum_order() -> Result<SumOrder> {
    SUM_ORDER.clone().map_err(crate::Error::new)
}

/// A push waiting for its round's update.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    /// World rank of the pusher.
    pub source: usize,
    /// The pusher's request id.
    pub req: u64,
    /// The pusher wants the updated value back (push-pull).
    pub want_value: bool,
    /// Not a push: a pull deferred to the end of the round that holds the puller's push
    /// (`PullAfter`); answered with the value.
    pub pull: bool,
    /// The elements `(first, count)` of the part that this push carried, when the part was
    /// pushed in chunks (`chunked`): a push-pull is answered with those elements only.
    pub chunk: Option<(usize, usize)>,
    /// A pull whose worker forwards the value to its partner (`PullAfter`'s `relay`).
    pub relay: bool,
}

/// A round in progress: `V` is a pushed value in the server's working form.
pub struct Round<V> {
    order: SumOrder,
    /// Values that arrived before a lower rank's, by worker rank.
    held: Vec<Option<V>>,
    /// Which worker ranks have pushed in this round.
    pushed: Vec<bool>,
    /// The next worker rank to fold (rank order).
    next: usize,
    /// Values folded so far.
    folded: usize,
    requests: Vec<Request>,
}

impl<V> Round<V> {
    /// An empty round of `workers` workers.
    pub fn new(workers: usize, order: SumOrder) -> Round<V> {
        Round { order, held: (0..workers).map(|_| None).collect(), pushed: vec![false; workers], next: 0, folded: 0, requests: Vec::new() }
    }

    /// No push has arrived in this round.
    pub fn is_empty(&self) -> bool {
        self.requests.is_empty()
    }

    /// Records worker `rank`'s push. `Ok(true)`: fold its value now; `Ok(false)`: a lower
    /// rank has not pushed yet, so hand the value to [`Round::hold`].
    ///
    /// A round with at most two workers that have not joined is folded as it arrives: the
    /// sum of two values is the same bits in either order (addition is commutative), so
    /// nothing is held. A worker joins only once its pushes have completed, so a round that
    /// holds a value has at least three possible contributors and never mixes the two ways.
    pub fn arrive(&mut self, rank: usize, request: Request, joined: &[bool]) -> Result<bool> {
        crate::ensure!(rank < self.pushed.len(), "worker rank {rank} is outside the job's {} workers", self.pushed.len());
        crate::ensure!(!self.pushed[rank], "worker {rank} pushed twice in one sync round (its second push is refused)");
        self.pushed[rank] = true;
        self.requests.push(request);
        if rank == self.next {
            self.next += 1;
            return Ok(true);
        }
        let contributors = joined.iter().filter(|&&j| !j).count();
        Ok(self.order == SumOrder::Arrival || contributors <= 2)
    }

    /// Records the push of workers 0 and 1 at once: the sum of their values, pushed by one of
    /// them (`wire::PUSH_PAIRED`), answered through `request`. In rank order it is the round's
    /// first fold, `w0 + w1` (the same bits as `w1 + w0`); `Ok(true)`: fold it now.
    pub fn arrive_pair(&mut self, request: Request) -> Result<bool> {
        crate::ensure!(self.pushed.len() >= 2, "a paired push in a job of {} worker(s)", self.pushed.len());
        for rank in 0..2 {
            crate::ensure!(!self.pushed[rank], "worker {rank} pushed twice in one sync round (its second push is refused)");
        }
        self.pushed[0] = true;
        self.pushed[1] = true;
        self.requests.push(request);
        if self.next == 0 {
            self.next = 2;
            return Ok(true);
        }
        Ok(self.order == SumOrder::Arrival)
    }

    /// The worker ranks an open round waits for (not pushed, not joined), and how many have
    /// pushed; nothing for a round no push has opened.
    pub fn missing(&self, joined: &[bool]) -> (Vec<usize>, usize) {
        if self.is_empty() {
            return (Vec::new(), 0);
        }
        let missing = self.pushed.iter().zip(joined).enumerate().filter(|(_, (&p, &j))| !p && !j).map(|(r, _)| r).collect();
        (missing, self.pushed.iter().filter(|&&p| p).count())
    }

    /// Whether worker `rank` has pushed in this (open) round.
    pub fn has_pushed(&self, rank: usize) -> bool {
        self.pushed.get(rank).copied().unwrap_or(false)
    }

    /// Keeps an early value until the ranks before it have been folded.
    pub fn hold(&mut self, rank: usize, value: V) {
        self.held[rank] = Some(value);
    }

    /// The held values that can be folded now, in rank order: each rank before them has
    /// been folded or has joined without pushing.
    pub fn ready(&mut self, joined: &[bool]) -> Vec<V> {
        let mut out = Vec::new();
        while self.next < self.pushed.len() {
            if let Some(v) = self.held[self.next].take() {
                out.push(v);
            } else if !(self.pushed[self.next] || joined[self.next]) {
                // Neither folded (out of order: see `arrive`) nor joined: wait for it.
                break;
            }
            self.next += 1;
        }
        out
    }

    /// Whether the next value folded is the round's first (it is copied, not added).
    pub fn start_fold(&mut self) -> bool {
        self.folded += 1;
        self.folded == 1
    }

    /// Every worker has pushed or joined (and, in rank order, every value is folded).
    pub fn complete(&self, joined: &[bool]) -> bool {
        !self.requests.is_empty()
            && self.pushed.iter().zip(joined).all(|(&p, &j)| p || j)
            && self.held.iter().all(Option::is_none)
    }

    /// Ends the round: its pushes, to be answered; the round is empty again.
    pub fn finish(&mut self) -> Vec<Request> {
        self.pushed.iter_mut().for_each(|p| *p = false);
        self.held.iter_mut().for_each(|h| *h = None);
        self.next = 0;
        self.folded = 0;
        std::mem::take(&mut self.requests)
    }
}

/// A server's per-key state that sums sync rounds.
pub trait Folds {
    /// A pushed value in the server's working form.
    type Value;
    /// The round in progress.
    fn round(&mut self) -> &mut Round<Self::Value>;
    /// Adds a value to the round's sum (copies it, for the round's first).
    fn fold(&mut self, value: Self::Value) -> Result<()>;
}

/// Folds the held values of `entry`'s round that are due; once every worker has pushed or
/// joined, ends the round and returns its pushes, to be answered after the update.
pub fn advance<E: Folds>(entry: &mut E, joined: &[bool]) -> Result<Option<Vec<Request>>> {
    for v in entry.round().ready(joined) {
        entry.fold(v)?;
    }
    if !entry.round().complete(joined) {
        return Ok(None);
    }
    Ok(Some(entry.round().finish()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(source: usize) -> Request {
        Request { source, req: source as u64, want_value: false, pull: false, chunk: None, relay: false }
    }

    /// Folds a round fed in `arrival` order (joined ranks in `joined`) and returns the fold
    /// sequence.
    fn folds(order: SumOrder, arrival: &[usize], joined: &[bool]) -> Vec<usize> {
        let mut round = Round::new(joined.len(), order);
        let mut seq = Vec::new();
        for &r in arrival {
            if round.arrive(r, request(r), joined).unwrap() {
                seq.push(r);
            } else {
                round.hold(r, r);
            }
            seq.extend(round.ready(joined));
        }
        assert!(round.complete(joined), "round incomplete after {arrival:?}");
        assert_eq!(round.finish().len(), arrival.len());
        seq
    }

    /// Every permutation of `0..n`.
    fn permutations(n: usize) -> Vec<Vec<usize>> {
        if n == 0 {
            return vec![Vec::new()];
        }
        let mut out = Vec::new();
        for p in permutations(n - 1) {
            for at in 0..=p.len() {
                let mut q = p.clone();
                q.insert(at, n - 1);
                out.push(q);
            }
        }
        out
    }

    #[test]
    fn rank_order_folds_in_rank_order_whatever_the_arrival() {
        let none = [false; 4];
        let all = permutations(4);
        assert_eq!(all.len(), 24);
        for arrival in all {
            assert_eq!(folds(SumOrder::Rank, &arrival, &none), vec![0, 1, 2, 3], "arrival {arrival:?}");
            assert_eq!(folds(SumOrder::Arrival, &arrival, &none), arrival);
        }
    }

    #[test]
    fn joined_ranks_are_skipped() {
        let joined = [false, true, false, false, true];
        assert_eq!(folds(SumOrder::Rank, &[3, 2, 0], &joined), vec![0, 2, 3]);
        // A join while a later rank's value is held releases it.
        let mut round = Round::new(3, SumOrder::Rank);
        assert!(round.arrive(0, request(0), &[false; 3]).unwrap());
        assert!(!round.arrive(2, request(2), &[false; 3]).unwrap());
        round.hold(2, 2);
        assert!(round.ready(&[false; 3]).is_empty());
        assert!(!round.complete(&[false; 3]));
        assert_eq!(round.ready(&[false, true, false]), vec![2]);
        assert!(round.complete(&[false, true, false]));
    }

    #[test]
    fn two_contributors_are_folded_as_they_arrive() {
        // Two workers, or two left after joins: either order is the same bits, nothing held.
        assert_eq!(folds(SumOrder::Rank, &[1, 0], &[false; 2]), vec![1, 0]);
        assert_eq!(folds(SumOrder::Rank, &[3, 1], &[true, false, true, false]), vec![3, 1]);
    }

    #[test]
    fn an_open_round_waits_for_the_ranks_that_have_neither_pushed_nor_joined() {
        let mut round: Round<usize> = Round::new(4, SumOrder::Rank);
        assert_eq!(round.missing(&[false; 4]), (vec![], 0), "no push: the round owes nothing");
        assert!(round.arrive(2, request(2), &[false; 4]).is_ok());
        round.hold(2, 2);
        assert_eq!(round.missing(&[false, true, false, false]), (vec![0, 3], 1));
    }

    #[test]
    fn a_round_knows_who_has_pushed() {
        let mut round: Round<usize> = Round::new(2, SumOrder::Rank);
        assert!(!round.has_pushed(0));
        assert!(round.arrive(0, request(0), &[false; 2]).unwrap());
        assert!(round.has_pushed(0) && !round.has_pushed(1));
        assert!(round.arrive(1, request(1), &[false; 2]).unwrap());
        assert!(round.complete(&[false; 2]));
        assert_eq!(round.finish().iter().map(|r| r.req).collect::<Vec<_>>(), vec![0, 1]);
        assert!(round.is_empty() && !round.has_pushed(0));
        assert!(round.finish().is_empty());
    }

    #[test]
    fn a_second_push_of_a_rank_in_one_round_is_refused() {
        let mut round: Round<usize> = Round::new(3, SumOrder::Rank);
        assert!(round.arrive(1, request(1), &[false; 3]).is_ok_and(|now| !now));
        assert!(round.arrive(1, request(1), &[false; 3]).is_err());
        assert!(round.arrive(5, request(5), &[false; 3]).is_err());
    }

    #[test]
    fn a_paired_push_is_the_first_fold_of_workers_0_and_1_whatever_came_before() {
        let none = [false; 4];
        for early in [vec![], vec![3], vec![2, 3], vec![3, 2]] {
            let mut round: Round<usize> = Round::new(4, SumOrder::Rank);
            let mut seq = Vec::new();
            for &r in &early {
                assert!(!round.arrive(r, request(r), &none).unwrap());
                round.hold(r, r);
            }
            assert!(round.arrive_pair(request(0)).unwrap(), "the pair's sum folds at once");
            seq.push(1);
            seq.extend(round.ready(&none));
            for r in (2..4).filter(|r| !early.contains(r)) {
                if round.arrive(r, request(r), &none).unwrap() {
                    seq.push(r);
                } else {
                    round.hold(r, r);
                }
                seq.extend(round.ready(&none));
            }
            assert_eq!(seq, vec![1, 2, 3], "early {early:?}");
            assert!(round.complete(&none));
            assert!(round.has_pushed(1));
            assert_eq!(round.finish().len(), 3, "the pair's push is one request");
        }
        let mut round: Round<usize> = Round::new(3, SumOrder::Rank);
        assert!(round.arrive(1, request(1), &[false; 3]).is_ok());
        assert!(round.arrive_pair(request(0)).is_err(), "worker 1 pushed already");
        assert!(Round::<usize>::new(1, SumOrder::Rank).arrive_pair(request(0)).is_err());
    }
}
