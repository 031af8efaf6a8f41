//! A failure the tests can switch on, to prove that a server's internal error fails the job
//! instead of leaving its workers waiting for replies: `KVSTORE_TEST_FAILPOINT=server-push-panic:N`
//! makes a server panic while handling a dense push of exactly N elements. Read once; for
//! tests only (`tests/dist_programs.rs`), never set in production.

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
