//! Failures of asynchronous ops, kept on the variables the ops write until a wait reports
//! them, as MXNet 1.9's threaded engine does:
//!
//! - an op that fails (an error or a panic) poisons every variable it writes;
//! - a later op that reads or writes a poisoned variable does not run: it fails with the same
//!   failure, which so reaches its own outputs;
//! - a wait on a variable (`WaitToRead`, `WaitToWrite`, the synchronous copies) reports the
//!   failure and clears it; the failure is one shared cell, so clearing it clears it on every
//!   variable it reached (MXNet nulls the shared `exception_ptr`);
//! - `WaitAll` reports the first failure since the last `WaitAll` and clears them all.
//!
//! Variables are named by their id, never by address, so a failure recorded on a variable
//! that is freed before anyone waits for it cannot attach to a new one.

use crate::error::Error;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// One failure, shared by every variable and op it reached; empty once reported.
pub(crate) struct Failure(Mutex<Option<Error>>);

impl Failure {
    pub(crate) fn new(error: Error) -> Arc<Failure> {
        Arc::new(Failure(Mutex::new(Some(error))))
    }

    fn is_live(&self) -> bool {
        self.0.lock().is_some()
    }

    fn take(&self) -> Option<Error> {
        self.0.lock().take()
    }

    /// The failure's message while it is unreported.
    pub(crate) fn message(&self) -> Option<String> {
        self.0.lock().as_ref().map(|e| e.message().to_string())
    }
}

#[derive(Default)]
pub(crate) struct Poison {
    /// Entries in `by_var`: the common case (nothing failed) checks this and nothing else.
    entries: AtomicUsize,
    by_var: Mutex<HashMap<u64, Arc<Failure>>>,
    /// Every failure since the last `WaitAll`, oldest first.
    all: Mutex<Vec<Arc<Failure>>>,
}

impl Poison {
    fn any(&self) -> bool {
        self.entries.load(Ordering::Acquire) > 0
    }

    /// The live failure on any of `vars`, which an op touching them inherits.
    pub(crate) fn find(&self, vars: &[u64]) -> Option<Arc<Failure>> {
        if !self.any() {
            return None;
        }
        let by_var = self.by_var.lock();
        vars.iter().filter_map(|v| by_var.get(v)).find(|f| f.is_live()).cloned()
    }

    /// Records `failure` on the variables an op writes.
    pub(crate) fn record(&self, writes: &[u64], failure: &Arc<Failure>) {
        let mut by_var = self.by_var.lock();
        for v in writes {
            by_var.insert(*v, Arc::clone(failure));
        }
        self.entries.store(by_var.len(), Ordering::Release);
        drop(by_var);
        let mut all = self.all.lock();
        // Failures already reported at a wait need not wait for `WaitAll`.
        all.retain(|f| f.is_live());
        if !all.iter().any(|f| Arc::ptr_eq(f, failure)) {
            all.push(Arc::clone(failure));
        }
    }

    /// Reports and clears the failure on any of `vars` (a wait on them).
    pub(crate) fn take(&self, vars: &[u64]) -> Option<Error> {
        if !self.any() {
            return None;
        }
        let mut by_var = self.by_var.lock();
        let mut error = None;
        for v in vars {
            if let Some(f) = by_var.remove(v) {
                error = error.or_else(|| f.take());
            }
        }
        // Failures cleared through another variable leave empty entries behind.
        by_var.retain(|_, f| f.is_live());
        self.entries.store(by_var.len(), Ordering::Release);
        error
    }

    /// Reports the first failure since the last call and clears them all (`WaitAll`).
    pub(crate) fn take_all(&self) -> Option<Error> {
        let failures = std::mem::take(&mut *self.all.lock());
        let first = failures.iter().find_map(|f| f.take());
        for f in &failures {
            f.take();
        }
        if self.any() {
            let mut by_var = self.by_var.lock();
            by_var.retain(|_, f| f.is_live());
            self.entries.store(by_var.len(), Ordering::Release);
        }
        first
    }

    /// Forgets a variable that is going away.
    pub(crate) fn forget(&self, var: u64) {
        if self.any() {
            let mut by_var = self.by_var.lock();
            by_var.remove(&var);
            self.entries.store(by_var.len(), Ordering::Release);
        }
    }
}
