//! The workers of a job as a server sees them: which world rank is which worker rank, and
//! which workers have *joined* — finished their work (freed their store, or reached the exit
//! protocol, `MXNotifyShutdown` included). From then on a joined worker's share of every sync
//! round counts as zero (Horovod's join), its pushes are refused, and worker barriers no
//! longer wait for it. Server 0 also coordinates the worker barriers here: a `Barrier` is
//! released when every worker that has not joined is waiting; the exit barrier when every
//! worker has joined and arrived. A worker barrier also checks that its workers placed their
//! keys alike: each brings the fingerprint of its placement ([`super::shard::Balance`]).

use super::wire::{INIT_REFUSED, PUSH_FOR_PARTNER, PUSH_PAIRED};
use crate::error::Result;

/// A request waiting at a barrier: (world rank, request id).
pub type Waiter = (usize, u64);

/// A request a barrier releases, with the refusal to answer it with, if any.
pub type Released = (Waiter, Option<String>);

/// Membership and barrier state of one server.
pub struct Members {
    /// World ranks of the workers, by worker rank.
    workers: Vec<usize>,
    joined: Vec<bool>,
    /// Workers waiting at a `Barrier`.
    waiting: Vec<Waiter>,
    /// The placement fingerprint each of `waiting` brought.
    placed: Vec<u64>,
    /// Workers waiting at the exit barrier.
    exiting: Vec<Waiter>,
}

impl Members {
    /// The job's workers, by worker rank (their world ranks).
    pub fn new(workers: Vec<usize>) -> Members {
        let n = workers.len();
        Members { workers, joined: vec![false; n], waiting: Vec::new(), placed: Vec::new(), exiting: Vec::new() }
    }

    /// The world ranks of the workers, by worker rank.
    pub fn workers(&self) -> &[usize] {
        &self.workers
    }

    /// Which workers have joined, by worker rank.
    pub fn joined(&self) -> &[bool] {
        &self.joined
    }

    /// The worker rank of world rank `source`, which must be a worker that has not joined
    /// (`what` names the refused request).
    pub fn active_worker(&self, source: usize, what: &dyn Fn() -> String) -> Result<usize> {
        let rank = self.worker_rank(source, what)?;
        crate::ensure!(
            !self.joined[rank],
            "worker {rank} (MPI rank {source}) sent {} after it joined (finished its work and began the exit protocol): refused, not applied",
            what()
        );
        Ok(rank)
    }

    /// The worker ranks a dense push from world rank `source` with `flags` is the push of, each
    /// not joined: its sender's, or with `PUSH_PAIRED` workers 0 and 1 (the sender one of
    /// them), or with `PUSH_FOR_PARTNER` the sender's partner's (workers 0 and 1 are partners,
    /// see the worker's `pairs`).
    pub fn pushers(&self, source: usize, flags: u8, what: &dyn Fn() -> String) -> Result<Vec<usize>> {
        let rank = self.worker_rank(source, what)?;
        let ranks = if flags & (PUSH_PAIRED | PUSH_FOR_PARTNER) == 0 {
            vec![rank]
        } else {
            crate::ensure!(rank < 2 && self.workers.len() >= 2, "worker {rank} (MPI rank {source}) sent {} for a partner, which only workers 0 and 1 have", what());
            if flags & PUSH_PAIRED != 0 {
                vec![0, 1]
            } else {
                vec![rank ^ 1]
            }
        };
        for &r in &ranks {
            crate::ensure!(
                !self.joined[r],
                "worker {r} (MPI rank {}) sent {} after it joined (finished its work and began the exit protocol): refused, not applied",
                self.workers[r],
                what()
            );
        }
        Ok(ranks)
    }

    fn worker_rank(&self, source: usize, what: &dyn Fn() -> String) -> Result<usize> {
        self.workers.iter().position(|&w| w == source).ok_or_else(|| crate::Error::new(format!("MPI rank {source} is not a worker: {} refused", what())))
    }

    /// Records that world rank `source` has joined; returns the barrier waiters this
    /// releases.
    pub fn join(&mut self, source: usize) -> Result<Vec<Released>> {
        let rank = self.worker_rank(source, &|| "a join".to_string())?;
        self.joined[rank] = true;
        Ok(self.release())
    }

    /// A worker reaches a barrier (`exit`: the exit barrier, for which it must have joined;
    /// `placed`: its placement fingerprint); returns the waiters released, possibly none yet.
    /// A worker barrier whose workers bring different fingerprints releases every one of
    /// them with a refusal: their key placements differ.
    pub fn barrier(&mut self, source: usize, req: u64, exit: bool, placed: u64) -> Result<Vec<Released>> {
        if exit {
            let rank = self.worker_rank(source, &|| "the exit barrier".to_string())?;
            crate::ensure!(self.joined[rank], "worker {rank} reached the exit barrier before joining");
            self.exiting.push((source, req));
        } else {
            self.active_worker(source, &|| "a barrier".to_string())?;
            self.waiting.push((source, req));
            self.placed.push(placed);
        }
        Ok(self.release())
    }

    /// The workers a barrier in progress waits for, by world rank, with whether it is the
    /// exit barrier.
    pub fn missing(&self) -> Vec<(usize, bool)> {
        let mut out = Vec::new();
        let arrived = |list: &[Waiter], w: usize| list.iter().any(|&(s, _)| s == w);
        if !self.waiting.is_empty() {
            let active = self.workers.iter().zip(&self.joined).filter(|(_, &j)| !j).map(|(&w, _)| w);
            out.extend(active.filter(|&w| !arrived(&self.waiting, w)).map(|w| (w, false)));
        }
        if !self.exiting.is_empty() {
            out.extend(self.workers.iter().filter(|&&w| !arrived(&self.exiting, w)).map(|&w| (w, true)));
        }
        out
    }

    fn release(&mut self) -> Vec<Released> {
        let active = self.joined.iter().filter(|&&j| !j).count();
        let mut out = Vec::new();
        if !self.waiting.is_empty() && self.waiting.len() >= active {
            let refused = self.disagreement();
            self.placed.clear();
            out.extend(self.waiting.drain(..).map(|w| (w, refused.clone())));
        }
        if self.exiting.len() == self.workers.len() {
            out.extend(self.exiting.drain(..).map(|w| (w, None)));
        }
        out
    }

    /// Why the workers at the barrier cannot go on, if worker 0 refused the init before it or
    /// they placed their keys differently.
    fn disagreement(&self) -> Option<String> {
        if self.placed.contains(&INIT_REFUSED) {
            return Some("worker 0 refused this init (its own error says why): no worker initialised the call's keys".to_string());
        }
        if self.placed.iter().all(|&p| p == self.placed[0]) {
            return None;
        }
        let mut groups: Vec<(u64, Vec<usize>)> = Vec::new();
        for (&(source, _), &placed) in self.waiting.iter().zip(&self.placed) {
            let rank = self.workers.iter().position(|&w| w == source).unwrap_or(usize::MAX);
            match groups.iter_mut().find(|(p, _)| *p == placed) {
                Some((_, ranks)) => ranks.push(rank),
                None => groups.push((placed, vec![rank])),
            }
        }
        let shown: Vec<String> = groups
            .iter_mut()
            .map(|(placed, ranks)| {
                ranks.sort_unstable();
                let ranks: Vec<String> = ranks.iter().map(|r| r.to_string()).collect();
                format!("worker {}: {placed:016x}", ranks.join(", "))
            })
            .collect();
        Some(format!(
            "the workers reached this barrier with different keys initialised (key placement fingerprints {}): every worker must init the same keys, with the same shapes and types, in the same init calls, before the same barriers, and with the same KVSTORE_DIST_BALANCE; otherwise pushes would go to servers that do not hold their keys",
            shown.join("; ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The waiters released, all without a refusal.
    fn ok(released: Result<Vec<Released>>) -> Vec<Waiter> {
        released
            .unwrap()
            .into_iter()
            .map(|(w, refused)| {
                assert_eq!(refused, None);
                w
            })
            .collect()
    }

    #[test]
    fn a_push_is_its_senders_or_with_a_partner_flag_the_pairs() {
        // Workers are world ranks 2, 3, 4.
        let mut m = Members::new(vec![2, 3, 4]);
        let what = || "a push".to_string();
        assert_eq!(m.pushers(4, 0, &what).unwrap(), vec![2]);
        assert_eq!(m.pushers(3, PUSH_PAIRED, &what).unwrap(), vec![0, 1]);
        assert_eq!(m.pushers(2, PUSH_FOR_PARTNER, &what).unwrap(), vec![1]);
        assert_eq!(m.pushers(3, PUSH_FOR_PARTNER, &what).unwrap(), vec![0]);
        assert!(m.pushers(4, PUSH_PAIRED, &what).is_err(), "worker 2 has no partner");
        assert!(m.pushers(9, 0, &what).is_err());
        // A joined worker: its own push, a pair's and one forwarded for it are refused; a
        // push its partner forwards for the other is not.
        m.join(2).unwrap();
        assert!(m.pushers(2, 0, &what).is_err());
        assert!(m.pushers(3, PUSH_PAIRED, &what).is_err());
        assert!(m.pushers(3, PUSH_FOR_PARTNER, &what).is_err());
        assert_eq!(m.pushers(2, PUSH_FOR_PARTNER, &what).unwrap(), vec![1]);
    }

    #[test]
    fn barriers_wait_for_the_workers_that_have_not_joined() {
        // Workers are world ranks 2, 3, 4.
        let mut m = Members::new(vec![2, 3, 4]);
        assert!(m.missing().is_empty(), "no barrier in progress: no one is waited for");
        assert!(ok(m.barrier(2, 10, false, 7)).is_empty());
        assert!(ok(m.barrier(3, 11, false, 7)).is_empty());
        // Worker 2 (world 4) finishes instead of reaching the barrier: the others go on.
        assert_eq!(ok(m.join(4)), vec![(2, 10), (3, 11)]);
        assert!(ok(m.barrier(4, 12, true, 7)).is_empty());
        assert!(m.barrier(4, 13, false, 7).is_err(), "a joined worker's barrier is refused");
        assert!(m.active_worker(4, &|| "a push".into()).is_err());
        assert_eq!(m.active_worker(3, &|| "a push".into()).unwrap(), 1);
        // Only the exit barrier, which world rank 4 reached, is in progress.
        assert_eq!(m.missing(), vec![(2, true), (3, true)]);
        assert!(ok(m.barrier(2, 14, false, 7)).is_empty());
        // Worker 2 (world 4) has joined: only world rank 3 is waited for, and world rank 4
        // at the exit barrier it reached.
        assert_eq!(m.missing(), vec![(3, false), (2, true), (3, true)]);
        assert_eq!(ok(m.barrier(3, 15, false, 7)), vec![(2, 14), (3, 15)]);
        // The exit barrier completes with the last worker's arrival.
        assert_eq!(m.missing(), vec![(2, true), (3, true)], "no worker barrier in progress");
        assert!(m.barrier(2, 16, true, 7).is_err(), "exit before join is refused");
        m.join(2).unwrap();
        m.join(3).unwrap();
        assert!(ok(m.barrier(2, 16, true, 7)).is_empty());
        assert_eq!(ok(m.barrier(3, 17, true, 7)), vec![(4, 12), (2, 16), (3, 17)]);
        assert!(m.join(0).is_err(), "world rank 0 is not a worker");
    }

    #[test]
    fn a_barrier_of_workers_that_placed_keys_differently_refuses_them_all() {
        let mut m = Members::new(vec![2, 3, 4]);
        assert!(ok(m.barrier(2, 10, false, 0xaa)).is_empty());
        assert!(ok(m.barrier(4, 11, false, 0xbb)).is_empty());
        let released = m.barrier(3, 12, false, 0xaa).unwrap();
        assert_eq!(released.iter().map(|(w, _)| *w).collect::<Vec<_>>(), vec![(2, 10), (4, 11), (3, 12)]);
        for (_, refused) in &released {
            let e = refused.as_deref().expect("every waiter is refused");
            assert!(e.contains("worker 0, 1: 00000000000000aa; worker 2: 00000000000000bb"), "{e}");
            assert!(e.contains("every worker must init the same keys"), "{e}");
        }
        // The next barrier starts afresh: agreeing workers pass.
        assert!(ok(m.barrier(2, 13, false, 0xcc)).is_empty());
        assert!(ok(m.barrier(3, 14, false, 0xcc)).is_empty());
        assert_eq!(ok(m.barrier(4, 15, false, 0xcc)), vec![(2, 13), (3, 14), (4, 15)]);
        // A joined worker's fingerprint is not waited for; the exit barrier checks none.
        m.join(4).unwrap();
        assert!(ok(m.barrier(2, 16, false, 0xdd)).is_empty());
        assert_eq!(ok(m.barrier(3, 17, false, 0xdd)), vec![(2, 16), (3, 17)]);
    }

    #[test]
    fn a_barrier_after_an_init_worker_0_refused_refuses_every_worker_and_the_next_starts_afresh() {
        let mut m = Members::new(vec![2, 3]);
        assert!(ok(m.barrier(3, 10, false, 0xaa)).is_empty());
        let released = m.barrier(2, 11, false, INIT_REFUSED).unwrap();
        assert_eq!(released.len(), 2);
        for (_, refused) in &released {
            let e = refused.as_deref().expect("every waiter is refused");
            assert!(e.contains("worker 0 refused this init"), "{e}");
        }
        assert!(ok(m.barrier(2, 12, false, 0xaa)).is_empty());
        assert_eq!(ok(m.barrier(3, 13, false, 0xaa)), vec![(2, 12), (3, 13)]);
    }
}
