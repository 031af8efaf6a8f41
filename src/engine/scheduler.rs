//! The seam between the engine's bookkeeping and where its ops run. By default ops run on the
//! engine's own workers, ordered by its own dependency tracking. In hosted mode a host engine
//! (the host's `MXEnginePushAsyncND`) runs them instead: every variable is then also a *token*
//! of the host's (an array of the host's standing for it), each op is one host op on the
//! tokens of what it reads and writes, and the host orders the store's ops with its own ops
//! on the same memory, with no handover between two engines.
//!
//! The engine keeps its failure bookkeeping ([`super::poison`]) and its own completions
//! either way, so its waits and failure reports mean the same thing in both modes.

use crate::error::Result;

/// Completes a host op: `None` for success, the failure's message otherwise.
pub type HostCompletion = Box<dyn FnOnce(Option<String>) + Send>;

/// The start of an op in the host's engine: called once its tokens are ready, with the
/// completion to call when the op is done and, where the host side found that the op cannot
/// run (the memory its tokens stand for is not as the op was queued for), why: the op then
/// fails with that reason instead of running. Dropped without being called (the host skipped
/// the op because a failure was kept on its tokens, or refused it), the op fails.
pub type HostStart = Box<dyn FnOnce(HostCompletion, Option<String>) + Send>;

/// A host engine that runs the engine's ops (see the module's text).
pub trait Scheduler: Send + Sync + 'static {
    /// Whether ops go to the host now (not once the host's engine has shut down).
    fn active(&self) -> bool;

    /// A new token: a dependency the host's engine tracks.
    fn new_token(&self) -> Result<usize>;

    /// Lets a token go (its variable is gone).
    fn release_token(&self, token: usize);

    /// Queues `start` as one host op reading `reads` and writing `writes` (each listed once,
    /// none in both). `Err` when the host refused it (then `start` is dropped).
    fn push(&self, reads: &[usize], writes: &[usize], priority: i32, start: HostStart) -> Result<()>;

    /// As [`Scheduler::push`], for an op whose start only takes hold of its tokens: the host
    /// may start it as soon as they are ready, ahead of ops queued before it on other tokens.
    fn push_prompt(&self, reads: &[usize], writes: &[usize], priority: i32, start: HostStart) -> Result<()> {
        self.push(reads, writes, priority, start)
    }

    /// Blocks until the host's ops writing (with `write`: reading or writing) `token` are done.
    fn wait(&self, token: usize, write: bool) -> Result<()>;
}

/// The read and write tokens of an op over `reads` and `writes` (given as tokens, where a
/// variable may be listed twice or in both): each once, writes winning, as the host's engine
/// requires.
pub(super) fn distinct(reads: &[usize], writes: &[usize]) -> (Vec<usize>, Vec<usize>) {
    let mut w = writes.to_vec();
    w.sort_unstable();
    w.dedup();
    let mut r = reads.to_vec();
    r.sort_unstable();
    r.dedup();
    r.retain(|t| w.binary_search(t).is_err());
    (r, w)
}

#[cfg(test)]
mod tests {
    use super::distinct;

    #[test]
    fn tokens_are_listed_once_and_a_token_read_and_written_is_a_write() {
        let (r, w) = distinct(&[1, 2, 2, 3], &[3, 4, 4]);
        assert_eq!(w, vec![3, 4]);
        assert_eq!(r, vec![1, 2]);
    }
}
