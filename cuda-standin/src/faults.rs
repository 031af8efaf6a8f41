//! Faults on demand: `CUDA_STANDIN_FAIL=<entry point>:<n>[,...]` makes the n-th call of that
//! entry point (counted from 1, per process) fail as the real driver would fail there.

use crate::result::{CUresult, ILLEGAL_ADDRESS, OUT_OF_MEMORY};
use once_cell::sync::Lazy;
use parking_lot::Mutex;
use std::collections::HashMap;

/// How an injected fault shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The call itself answers this code; 700 also makes the context's error sticky.
    Immediate(CUresult),
    /// The call succeeds and the work it enqueued faults on its stream (a sticky 700 reported
    /// by the next synchronising call), as a kernel or an asynchronous copy faults on a GPU.
    Deferred,
}

struct Plan {
    /// Entry point → the call numbers that fail.
    fail_at: HashMap<String, Vec<u64>>,
    /// Entry point → calls so far.
    calls: Mutex<HashMap<&'static str, u64>>,
}

static PLAN: Lazy<Plan> = Lazy::new(|| Plan { fail_at: parse(&std::env::var("CUDA_STANDIN_FAIL").unwrap_or_default()), calls: Mutex::new(HashMap::new()) });

/// `name:n,name:n` → name → [n, ...]; malformed items are reported on stderr and ignored.
fn parse(spec: &str) -> HashMap<String, Vec<u64>> {
    let mut plan: HashMap<String, Vec<u64>> = HashMap::new();
    for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        match item.rsplit_once(':').and_then(|(name, n)| Some((name, n.parse::<u64>().ok()?))) {
            Some((name, n)) if n > 0 => plan.entry(name.to_string()).or_default().push(n),
            _ => eprintln!("cuda-standin: ignoring CUDA_STANDIN_FAIL item {item:?} (want <entry point>:<n>, n >= 1)"),
        }
    }
    plan
}

/// Work an entry point enqueues on a stream: a fault there is found when the work runs.
fn is_stream_work(name: &str) -> bool {
    name == "cuLaunchKernel" || name.contains("Async") || name == "cuLaunchHostFunc"
}

/// Counts one call of `name`, and says how it must fail if this is a call the plan names.
pub fn on_call(name: &'static str) -> Option<Fault> {
    if PLAN.fail_at.is_empty() {
        return None;
    }
    let n = {
        let mut calls = PLAN.calls.lock();
        let n = calls.entry(name).or_insert(0);
        *n += 1;
        *n
    };
    if !PLAN.fail_at.get(name).is_some_and(|at| at.contains(&n)) {
        return None;
    }
    Some(if name.starts_with("cuMemAlloc") || name.starts_with("cuMemHostAlloc") {
        Fault::Immediate(OUT_OF_MEMORY)
    } else if is_stream_work(name) && name != "cuMemAllocAsync" {
        Fault::Deferred
    } else {
        Fault::Immediate(ILLEGAL_ADDRESS)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_entry_points_and_call_numbers() {
        let plan = parse("cuMemAlloc_v2:3, cuLaunchKernel:5,cuMemAlloc_v2:7,bad,cuInit:0");
        assert_eq!(plan["cuMemAlloc_v2"], vec![3, 7]);
        assert_eq!(plan["cuLaunchKernel"], vec![5]);
        assert_eq!(plan.len(), 2);
    }
}
