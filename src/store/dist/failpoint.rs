//! Test hooks, for tests only, never set in production; each is read once.
//! - `KVSTORE_TEST_FAILPOINT=server-push-panic:N` makes a server panic while handling a dense
//!   push of exactly N elements, to prove that a server's internal error fails the job
//!   instead of leaving its workers waiting for replies (`tests/dist_programs.rs`).
//! - `KVSTORE_TEST_FAILPOINT=push-after-join` makes each worker, once it has joined, send one
//!   raw push of a key to its servers and print their answer, to prove that a joined rank's
//!   push is refused, not applied.
//! - `KVSTORE_DIST_TEST_DELAY_US=RANK:MICROSECONDS,...` delays the pushes of worker RANK, to
//!   shuffle the arrival order of sync rounds (see `round`).

use once_cell::sync::Lazy;

static PANIC_ON_PUSH_LEN: Lazy<Vec<usize>> = Lazy::new(|| {
    std::env::var("KVSTORE_TEST_FAILPOINT").map_or(Vec::new(), |specs| {
        specs
            .split(',')
            .filter_map(|spec| spec.split_once(':'))
            .filter(|(what, _)| what.trim() == "server-push-panic")
            .filter_map(|(_, n)| n.trim().parse().ok())
            .collect()
    })
});

/// Panics when a failpoint names a push of `len` elements.
pub(super) fn check_push(len: usize) {
    if PANIC_ON_PUSH_LEN.contains(&len) {
        panic!("failpoint KVSTORE_TEST_FAILPOINT: the server's push of {len} elements panicked");
    }
}

/// `KVSTORE_DIST_TEST_DELAY_US=RANK:MICROSECONDS,...`: worker RANK waits that long before
/// sending each push (dense or row_sparse), to shuffle the order in which a sync round's
/// pushes reach the servers. Read once; for tests only (`tests/dist_programs.rs`,
/// `tests/hosted/dist_sync_rules.sh`): it slows every push of the named ranks.
static PUSH_DELAY_US: Lazy<Vec<(usize, u64)>> = Lazy::new(|| {
    std::env::var("KVSTORE_DIST_TEST_DELAY_US").map_or(Vec::new(), |specs| {
        specs
            .split(',')
            .filter_map(|spec| spec.split_once(':'))
            .filter_map(|(rank, us)| Some((rank.trim().parse().ok()?, us.trim().parse().ok()?)))
            .collect()
    })
});

/// The test delay of worker `rank`'s pushes (zero unless `KVSTORE_DIST_TEST_DELAY_US` names it).
pub(super) fn push_delay(rank: usize) -> std::time::Duration {
    let us = PUSH_DELAY_US.iter().filter(|(r, _)| *r == rank).map(|(_, us)| *us).sum();
    std::time::Duration::from_micros(us)
}

static PUSH_AFTER_JOIN: Lazy<bool> =
    Lazy::new(|| std::env::var("KVSTORE_TEST_FAILPOINT").is_ok_and(|specs| specs.split(',').any(|s| s.trim() == "push-after-join")));

/// Whether a joined worker sends one more push (`KVSTORE_TEST_FAILPOINT=push-after-join`).
pub(super) fn push_after_join() -> bool {
    *PUSH_AFTER_JOIN
}
