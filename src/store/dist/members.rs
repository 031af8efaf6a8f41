//! The workers of a job as a server sees them: which world rank is which worker rank, and
//! which workers have *joined* — finished their work (freed their store, or reached the exit
//! protocol, `MXNotifyShutdown` included). From then on a joined worker's share of every sync
//! round counts as zero (Horovod's join), its pushes are refused, and worker barriers no
//! longer wait for it. Server 0 also coordinates the worker barriers here: a `Barrier` is
//! released when every worker that has not joined is waiting; the exit barrier when every
//! worker has joined and arrived.

use crate::error::Result;

/// A request waiting at a barrier: (world rank, request id).
pub type Waiter = (usize, u64);

/// Membership and barrier state of one server.
pub struct Members {
    /// World ranks of the workers, by worker rank.
    workers: Vec<usize>,
    joined: Vec<bool>,
    /// Workers waiting at a `Barrier`.
    waiting: Vec<Waiter>,
    /// Workers waiting at the exit barrier.
    exiting: Vec<Waiter>,
}

impl Members {
    /// The job's workers, by worker rank (their world ranks).
    pub fn new(workers: Vec<usize>) -> Members {
        let n = workers.len();
        Members { workers, joined: vec![false; n], waiting: Vec::new(), exiting: Vec::new() }
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

    fn worker_rank(&self, source: usize, what: &dyn Fn() -> String) -> Result<usize> {
        self.workers.iter().position(|&w| w == source).ok_or_else(|| crate::Error::new(format!("MPI rank {source} is not a worker: {} refused", what())))
    }

    /// Records that world rank `source` has joined; returns the barrier waiters this
    /// releases.
    pub fn join(&mut self, source: usize) -> Result<Vec<Waiter>> {
        let rank = self.worker_rank(source, &|| "a join".to_string())?;
        self.joined[rank] = true;
        Ok(self.release())
    }

    /// A worker reaches a barrier (`exit`: the exit barrier, for which it must have joined);
    /// returns the waiters released, possibly none yet.
    pub fn barrier(&mut self, source: usize, req: u64, exit: bool) -> Result<Vec<Waiter>> {
        if exit {
            let rank = self.worker_rank(source, &|| "the exit barrier".to_string())?;
            crate::ensure!(self.joined[rank], "worker {rank} reached the exit barrier before joining");
            self.exiting.push((source, req));
        } else {
            self.active_worker(source, &|| "a barrier".to_string())?;
            self.waiting.push((source, req));
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

    fn release(&mut self) -> Vec<Waiter> {
        let active = self.joined.iter().filter(|&&j| !j).count();
        let mut out = Vec::new();
        if !self.waiting.is_empty() && self.waiting.len() >= active {
            out.append(&mut self.waiting);
        }
        if self.exiting.len() == self.workers.len() {
            out.append(&mut self.exiting);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn barriers_wait_for_the_workers_that_have_not_joined() {
        // Workers are world ranks 2, 3, 4.
        let mut m = Members::new(vec![2, 3, 4]);
        assert!(m.missing().is_empty(), "no barrier in progress: no one is waited for");
        assert!(m.barrier(2, 10, false).unwrap().is_empty());
        assert!(m.barrier(3, 11, false).unwrap().is_empty());
        // Worker 2 (world 4) finishes instead of reaching the barrier: the others go on.
        assert_eq!(m.join(4).unwrap(), vec![(2, 10), (3, 11)]);
        assert!(m.barrier(4, 12, true).unwrap().is_empty());
        assert!(m.barrier(4, 13, false).is_err(), "a joined worker's barrier is refused");
        assert!(m.active_worker(4, &|| "a push".into()).is_err());
        assert_eq!(m.active_worker(3, &|| "a push".into()).unwrap(), 1);
        // Only the exit barrier, which world rank 4 reached, is in progress.
        assert_eq!(m.missing(), vec![(2, true), (3, true)]);
        assert!(m.barrier(2, 14, false).unwrap().is_empty());
        // Worker 2 (world 4) has joined: only world rank 3 is waited for, and world rank 4
        // at the exit barrier it reached.
        assert_eq!(m.missing(), vec![(3, false), (2, true), (3, true)]);
        assert_eq!(m.barrier(3, 15, false).unwrap(), vec![(2, 14), (3, 15)]);
        // The exit barrier completes with the last worker's arrival.
        assert_eq!(m.missing(), vec![(2, true), (3, true)], "no worker barrier in progress");
        assert!(m.barrier(2, 16, true).is_err(), "exit before join is refused");
        m.join(2).unwrap();
        m.join(3).unwrap();
        assert!(m.barrier(2, 16, true).unwrap().is_empty());
        assert_eq!(m.barrier(3, 17, true).unwrap(), vec![(4, 12), (2, 16), (3, 17)]);
        assert!(m.join(0).is_err(), "world rank 0 is not a worker");
    }
}
