//! Silent peers end the job (`KVSTORE_DIST_TIMEOUT`).
//!
//! A rank that waits for another — a worker for a server's answer, a server for a worker's
//! push to complete a sync round or for a worker to reach a barrier, any rank for a send to be
//! taken or for an all-node barrier — records what it waits for and from whom (an [`Owe`]).
//! The transport tells how long each peer has been *silent*: nothing heard from it, not even
//! the heartbeat its transport thread sends every [`heartbeat_interval`], whatever the rest of
//! the process is doing. A peer that is busy (a long update, a long compute phase between
//! pushes, a handler waiting for Python) keeps beating and is never silent; a stopped, frozen
//! or cut-off process, or one whose host is unreachable, is.
//!
//! A monitor thread per node checks every [`check_interval`]: when a peer it is owed something
//! by has been silent for longer than the timeout, or when it has heard from no other rank at
//! all for that long ([`isolated`]: its host is cut off, so it ends by itself even where it
//! waits for nothing, an idle server), it prints what it waited for, from which
//! rank on which host, and aborts the whole job (MPI_Abort: mpirun ends every rank on every
//! host). Nothing is half-applied: a server applies a round only once every push of it has
//! arrived, and an abort ends the job before any later round.

use crate::error::Result;
use once_cell::sync::Lazy;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// The timeout when `KVSTORE_DIST_TIMEOUT` is not set: long enough to ride out a network
/// outage of half a minute (the TCP retransmissions after one take as long again), short
/// enough that a job with a dead peer ends within about a minute instead of hanging.
pub const DEFAULT_TIMEOUT_S: f64 = 60.0;

static TIMEOUT: Lazy<std::result::Result<Option<Duration>, String>> = Lazy::new(|| match std::env::var("KVSTORE_DIST_TIMEOUT") {
    Err(_) => Ok(Some(Duration::from_secs_f64(DEFAULT_TIMEOUT_S))),
    Ok(v) => parse_timeout(&v),
});

/// `KVSTORE_DIST_TIMEOUT`'s value: seconds (fractions allowed), 0 for none.
fn parse_timeout(v: &str) -> std::result::Result<Option<Duration>, String> {
    match v.trim().parse::<f64>() {
        Ok(0.0) => Ok(None),
        Ok(s) if s.is_finite() && s > 0.0 && s < 1e9 => Ok(Some(Duration::from_secs_f64(s))),
        _ => Err(format!("KVSTORE_DIST_TIMEOUT={v:?}: expected seconds (e.g. 60 or 2.5), or 0 to never time out")),
    }
}

/// This process's timeout (`KVSTORE_DIST_TIMEOUT`, read once; `None`: never).
pub fn timeout() -> Result<Option<Duration>> {
    TIMEOUT.clone().map_err(crate::Error::new)
}

/// How often a process beats, for a job whose shortest timeout is `t`: six beats per timeout,
/// between 0.1 and 5 s.
pub fn heartbeat_interval(t: Duration) -> Duration {
    (t / 6).clamp(Duration::from_millis(100), Duration::from_secs(5))
}

/// How often the monitor looks, for a timeout `t`: ten times per timeout, between 0.05 and 1 s
/// (a silent peer is reported at most this long after the timeout).
pub fn check_interval(t: Duration) -> Duration {
    (t / 10).clamp(Duration::from_millis(50), Duration::from_secs(1))
}

/// A monitor's sleep of `every` that took longer than this: its own process was stopped.
fn self_stall(every: Duration) -> Duration {
    every * 2 + Duration::from_millis(500)
}

/// What a rank waits for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum What {
    /// A worker: the server's answer to its push of a key (`pull`: a push-pull).
    Push { key: i32, pull: bool },
    /// A worker: the server's answer to its pull of a key.
    Pull { key: i32 },
    /// A worker: a row_sparse push or pull.
    RowSparsePush { key: i32 },
    RowSparsePull { key: i32 },
    /// A worker: a command's answer.
    Command { id: i32 },
    /// A worker: the answer to another request (a barrier, a join, ...).
    Request(&'static str),
    /// A server: a worker's push to a sync round of a key that `pushed` workers have pushed to.
    RoundPush { key: i32, pushed: usize },
    /// Server 0: a worker's arrival at a worker barrier (`exit`: the exit barrier).
    BarrierArrival { exit: bool },
    /// Any rank: an all-node barrier.
    AllNodeBarrier(&'static str),
    /// Any rank: a message of `bytes` bytes to be taken by its receiver.
    Delivery { bytes: usize },
}

impl std::fmt::Display for What {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            What::Push { key, pull: false } => write!(f, "the answer to the push of key {key}"),
            What::Push { key, pull: true } => write!(f, "the answer to the push-pull of key {key}"),
            What::Pull { key } => write!(f, "the pull of key {key}"),
            What::RowSparsePush { key } => write!(f, "the answer to the row_sparse push of key {key}"),
            What::RowSparsePull { key } => write!(f, "the row_sparse pull of key {key}"),
            What::Command { id } => write!(f, "the answer to command {id}"),
            What::Request(what) => write!(f, "the answer to {what}"),
            What::RoundPush { key, pushed } => write!(f, "its push of key {key} (the sync round, which {pushed} other worker(s) have pushed to)"),
            What::BarrierArrival { exit: false } => write!(f, "it to reach the worker barrier"),
            What::BarrierArrival { exit: true } => write!(f, "it to reach the exit barrier"),
            What::AllNodeBarrier(when) => write!(f, "the all-node barrier {when}"),
            What::Delivery { bytes } => write!(f, "it to take a {bytes}-byte message"),
        }
    }
}

/// Something owed to this rank by `peer` (a world rank).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owe {
    pub peer: usize,
    pub what: What,
}

/// Lists what a store's state is owed (a worker's requests, a server's open rounds).
pub type Source = Box<dyn Fn(&mut Vec<Owe>) + Send + Sync>;

/// Who waits on whom, per node: the node's own waits (sends, all-node barriers) and the
/// sources of its stores.
#[derive(Default)]
pub struct Watch {
    next: AtomicU64,
    /// Node-level waits: `None` as peer means every other rank.
    waits: Mutex<HashMap<u64, (Option<usize>, What)>>,
    sources: Mutex<Vec<Source>>,
    /// How this rank names itself in its messages (e.g. "dist_sync worker 1").
    label: Mutex<String>,
    stopped: AtomicBool,
}

/// Removes a node-level wait when dropped.
pub struct Waiting<'a> {
    watch: &'a Watch,
    id: u64,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.watch.waits.lock().remove(&self.id);
    }
}

impl Watch {
    /// Records a wait on `peer` (`None`: on every other rank) until the guard is dropped.
    pub fn wait(&self, peer: Option<usize>, what: What) -> Waiting<'_> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.waits.lock().insert(id, (peer, what));
        Waiting { watch: self, id }
    }

    /// Adds a source of owes (kept until the node finalizes).
    pub fn add_source(&self, source: Source) {
        self.sources.lock().push(source);
    }

    /// Names this rank in the monitor's messages.
    pub fn set_label(&self, label: String) {
        *self.label.lock() = label;
    }

    /// Everything owed now; `others` are the ranks an all-rank wait is on.
    fn owed(&self, others: &[usize]) -> Vec<Owe> {
        let mut out = Vec::new();
        for (peer, what) in self.waits.lock().values() {
            match peer {
                Some(p) => out.push(Owe { peer: *p, what: what.clone() }),
                None => out.extend(others.iter().map(|&p| Owe { peer: p, what: what.clone() })),
            }
        }
        for source in self.sources.lock().iter() {
            source(&mut out);
        }
        out
    }

    /// Stops the monitor (the node has left the job).
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        self.sources.lock().clear();
    }
}

/// How long this rank has heard from none of `others`, if every one of them has been silent
/// for longer than `timeout`: this rank (its host) is cut off from the job, or the job's
/// other processes are all gone, whether or not it is owed anything (an idle server waits for
/// the next round's pushes, which are owed by no one yet).
pub fn isolated(others: &[usize], silence: impl Fn(usize) -> Option<Duration>, timeout: Duration) -> Option<Duration> {
    let quiet: Vec<Duration> = others.iter().map(|&r| silence(r)).collect::<Option<Vec<_>>>()?;
    let least = quiet.into_iter().min()?;
    (least > timeout).then_some(least)
}

/// The owe whose peer has been silent longest, if longer than `timeout`: `(owe, silence)`.
pub fn judge(owed: &[Owe], silence: impl Fn(usize) -> Option<Duration>, timeout: Duration) -> Option<(Owe, Duration)> {
    owed.iter()
        .filter_map(|o| silence(o.peer).filter(|s| *s > timeout).map(|s| (o.clone(), s)))
        .max_by_key(|(_, s)| *s)
}

/// What the monitor needs of its node.
pub trait Peers: Send + Sync {
    /// This rank.
    fn me(&self) -> usize;
    /// Every rank of the job.
    fn size(&self) -> usize;
    /// See [`crate::store::dist::transport::Transport::silence`].
    fn silence(&self, rank: usize) -> Option<Duration>;
    /// "server 1 (MPI rank 1)".
    fn describe(&self, rank: usize) -> String;
    /// The host rank `rank` runs on.
    fn host(&self, rank: usize) -> String;
    /// Ends the job.
    fn abort(&self, code: i32) -> !;
    /// See [`crate::store::dist::transport::Transport::abort_isolated`].
    fn abort_isolated(&self, code: i32) -> !;
}

/// Starts the monitor of a node's `watch` (a no-op without a timeout or where the transport
/// does not watch its peers). The thread holds the node weakly and ends with it.
pub fn start_monitor(watch: &Arc<Watch>, peers: Weak<dyn Peers>, timeout: Option<Duration>) {
    let Some(timeout) = timeout else { return };
    let Some(node) = peers.upgrade() else { return };
    let others: Vec<usize> = (0..node.size()).filter(|&r| r != node.me()).collect();
    if others.iter().all(|&r| node.silence(r).is_none()) {
        return;
    }
    drop(node);
    let watch = Arc::clone(watch);
    let every = check_interval(timeout);
    let mut last = Instant::now();
    let mut judge_from = last;
    let _ = std::thread::Builder::new().name("kvstore-dist-monitor".into()).spawn(move || loop {
        std::thread::sleep(every);
        if watch.stopped.load(Ordering::SeqCst) {
            return;
        }
        // A sleep that overran by far means this process itself was stopped or starved: its
        // own heartbeat thread has not yet read what its peers sent meanwhile, so every peer
        // would look silent. Judge again once that thread has caught up.
        let now = Instant::now();
        if now.duration_since(last) > self_stall(every) {
            judge_from = now + heartbeat_interval(timeout);
        }
        last = now;
        if now < judge_from {
            continue;
        }
        let Some(node) = peers.upgrade() else { return };
        let isolated = isolated(&others, |r| node.silence(r), timeout);
        let silent_owe = || judge(&watch.owed(&others), |r| node.silence(r), timeout);
        let (cause, silent) = match isolated {
            Some(silent) => (None, silent),
            None => match silent_owe() {
                Some((owe, silent)) => (Some(owe), silent),
                None => continue,
            },
        };
        if watch.stopped.load(Ordering::SeqCst) {
            return;
        }
        let me = node.me();
        let label = watch.label.lock().clone();
        let whom = match &cause {
            None => "any other rank".to_string(),
            Some(owe) => format!("{} on host {}", node.describe(owe.peer), node.host(owe.peer)),
        };
        let why = match &cause {
            None => "this host is cut off from the job, or every other process is gone".to_string(),
            Some(owe) => format!("while waiting for {}", owe.what),
        };
        let joint = if cause.is_some() { " " } else { ": " };
        // One write: mpirun relays each read of a rank's stderr as it comes, so a line written
        // in pieces interleaves with other ranks' reports of the same silence.
        let line = format!(
            "libkvstore: {label} (MPI rank {me} on host {}): no message from {whom} for {:.1} s (KVSTORE_DIST_TIMEOUT={} s){joint}{why}; aborting the MPI job\n",
            node.host(me),
            silent.as_secs_f64(),
            timeout.as_secs_f64()
        );
        let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), line.as_bytes());
        match cause {
            None => node.abort_isolated(1),
            Some(_) => node.abort(1),
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_timeout_is_seconds_or_zero_for_none() {
        assert_eq!(parse_timeout("30"), Ok(Some(Duration::from_secs(30))));
        assert_eq!(parse_timeout(" 2.5 "), Ok(Some(Duration::from_millis(2500))));
        assert_eq!(parse_timeout("0"), Ok(None));
        for bad in ["", "-1", "soon", "inf", "NaN"] {
            assert!(parse_timeout(bad).unwrap_err().contains("KVSTORE_DIST_TIMEOUT"), "{bad:?} accepted");
        }
        assert_eq!(heartbeat_interval(Duration::from_secs(60)), Duration::from_secs(5));
        assert_eq!(heartbeat_interval(Duration::from_secs(3)), Duration::from_millis(500));
        assert_eq!(check_interval(Duration::from_secs(3)), Duration::from_millis(300));
    }

    #[test]
    fn only_a_peer_that_owes_something_and_is_silent_past_the_timeout_is_judged() {
        let t = Duration::from_secs(3);
        let owed = vec![
            Owe { peer: 1, what: What::Pull { key: 7 } },
            Owe { peer: 2, what: What::RoundPush { key: 3, pushed: 1 } },
            Owe { peer: 3, what: What::BarrierArrival { exit: false } },
        ];
        let silence = |quiet: [u64; 5]| move |r: usize| Some(Duration::from_millis(quiet[r]));
        // Busy peers keep beating: nothing to judge however long the waits last.
        assert_eq!(judge(&owed, silence([0, 200, 900, 2999, 0]), t), None);
        // Rank 4 is silent but owes nothing (an idle peer is not waited for).
        assert_eq!(judge(&owed, silence([0, 0, 0, 0, 10_000]), t), None);
        // The longest-silent of the owing peers is named.
        let (owe, quiet) = judge(&owed, silence([0, 3500, 0, 4000, 99_000]), t).unwrap();
        assert_eq!((owe.peer, quiet), (3, Duration::from_secs(4)));
        // A transport that does not watch its peers never judges.
        assert_eq!(judge(&owed, |_| None, t), None);
    }

    #[test]
    fn a_rank_that_hears_from_no_other_past_the_timeout_is_isolated() {
        let t = Duration::from_secs(3);
        let quiet = |ms: [u64; 4]| move |r: usize| Some(Duration::from_millis(ms[r]));
        assert_eq!(isolated(&[1, 2, 3], quiet([0, 4000, 5000, 9000]), t), Some(Duration::from_millis(4000)));
        assert_eq!(isolated(&[1, 2, 3], quiet([0, 4000, 100, 9000]), t), None, "one peer still heard");
        assert_eq!(isolated(&[1, 2, 3], quiet([0, 2000, 2500, 2900]), t), None, "not past the timeout");
        assert_eq!(isolated(&[1, 2], |_| None, t), None, "no heartbeats: nothing to judge");
        assert_eq!(isolated(&[], quiet([0; 4]), t), None, "a job of one");
    }

    #[test]
    fn node_waits_count_until_dropped_and_sources_are_asked() {
        let watch = Watch::default();
        watch.add_source(Box::new(|out| out.push(Owe { peer: 5, what: What::Command { id: 0 } })));
        {
            let _a = watch.wait(Some(2), What::Delivery { bytes: 10 });
            let _b = watch.wait(None, What::AllNodeBarrier("at exit"));
            let mut owed = watch.owed(&[1, 2]);
            owed.sort_by_key(|o| (o.peer, format!("{}", o.what)));
            let peers: Vec<usize> = owed.iter().map(|o| o.peer).collect();
            assert_eq!(peers, vec![1, 2, 2, 5]);
        }
        assert_eq!(watch.owed(&[1, 2]), vec![Owe { peer: 5, what: What::Command { id: 0 } }]);
        watch.stop();
        assert!(watch.owed(&[1, 2]).is_empty());
    }
}
