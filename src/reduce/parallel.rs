//! Splitting big kernels over threads, sized by MXNet's environment variables.

use crate::base::affinity;
use once_cell::sync::Lazy;

/// How reductions use threads: MXNet's `MXNET_KVSTORE_REDUCTION_NTHREADS` and
/// `MXNET_KVSTORE_BIGARRAY_BOUND`.
#[derive(Debug, Clone, Copy)]
pub struct ReduceConfig {
    /// Threads for one big reduction.
    pub threads: usize,
    /// Elements from which a reduction is split over threads.
    pub bigarray_bound: usize,
}

fn env_usize(name: &str) -> Option<usize> {
    std::env::var(name).ok()?.trim().parse().ok()
}

static CONFIG: Lazy<ReduceConfig> = Lazy::new(|| {
    let cores = affinity::process_parallelism();
    ReduceConfig {
        threads: env_usize("MXNET_KVSTORE_REDUCTION_NTHREADS").filter(|&n| n > 0).unwrap_or(cores),
        bigarray_bound: env_usize("MXNET_KVSTORE_BIGARRAY_BOUND").unwrap_or(1_000_000),
    }
});

impl ReduceConfig {
    /// The process's configuration, read once from the environment.
    pub fn get() -> ReduceConfig {
        *CONFIG
    }

    /// How many threads to use for `len` elements.
    pub fn threads_for(&self, len: usize) -> usize {
        if len >= self.bigarray_bound.max(1) && self.threads > 1 {
            self.threads
        } else {
            1
        }
    }
}

/// Runs `f(offset, part)` on contiguous parts of `dst`, in parallel when `dst` is big: over
/// the configured threads, but at most `budget` (what the engine gives the op: its own thread
/// and the idle workers', so ops running side by side do not oversubscribe the machine). Part
/// boundaries are multiples of 4096 elements so each part stays cache-line aligned.
pub(crate) fn for_parts<T: Send>(dst: &mut [T], budget: usize, f: impl Fn(usize, &mut [T]) + Sync) {
    let n = dst.len();
    let threads = ReduceConfig::get().threads_for(n).min(budget.max(1));
    if threads <= 1 || n < 2 * 4096 {
        f(0, dst);
        return;
    }
    let per = n.div_ceil(threads).div_ceil(4096) * 4096;
    let _spread = affinity::unpinned();
    std::thread::scope(|scope| {
        let f = &f;
        let mut parts = dst.chunks_mut(per).enumerate();
        let first = parts.next();
        for (k, part) in parts {
            scope.spawn(move || f(k * per, part));
        }
        if let Some((_, part)) = first {
            f(0, part);
        }
    });
}

/// [`for_parts`] over `dst` and `others` (each at least as long) split alike: `f(offset, part
/// of dst, the same part of each other slice)`.
pub(crate) fn for_parts_with<T: Send>(dst: &mut [T], others: &mut [&mut [T]], budget: usize, f: impl Fn(usize, &mut [T], &mut [&mut [T]]) + Sync) {
    let n = dst.len();
    let threads = ReduceConfig::get().threads_for(n).min(budget.max(1));
    if threads <= 1 || n < 2 * 4096 {
        let mut whole: Vec<&mut [T]> = others.iter_mut().map(|o| &mut o[..n]).collect();
        f(0, dst, &mut whole);
        return;
    }
    let per = n.div_ceil(threads).div_ceil(4096) * 4096;
    let mut split: Vec<Vec<&mut [T]>> = (0..n.div_ceil(per)).map(|_| Vec::with_capacity(others.len())).collect();
    for other in others.iter_mut() {
        for (t, chunk) in other[..n].chunks_mut(per).enumerate() {
            split[t].push(chunk);
        }
    }
    let _spread = affinity::unpinned();
    std::thread::scope(|scope| {
        let f = &f;
        let mut parts = dst.chunks_mut(per).zip(split).enumerate();
        let first = parts.next();
        for (k, (part, mut rest)) in parts {
            scope.spawn(move || f(k * per, part, &mut rest));
        }
        if let Some((_, (part, mut rest))) = first {
            f(0, part, &mut rest);
        }
    });
}

/// Copies `src` into `dst` (same length), over up to `budget` threads when big.
pub(crate) fn copy(src: &[u8], dst: &mut [u8], elem_size: usize, budget: usize) {
    let n = dst.len().min(src.len());
    let elem_size = elem_size.max(1);
    // Split on whole elements so the thresholds are counted in elements, like MXNet's.
    let dst = &mut dst[..n];
    if ReduceConfig::get().threads_for(n / elem_size) <= 1 {
        dst.copy_from_slice(&src[..n]);
        return;
    }
    for_parts(dst, budget, |offset, part| part.copy_from_slice(&src[offset..offset + part.len()]));
}

#[cfg(test)]
mod tests {
    use super::*;
    use parking_lot::Mutex;

    #[test]
    fn the_parts_of_a_pinned_thread_run_on_every_cpu_of_the_process() {
        let all = affinity::process_cpus().to_vec();
        if all.len() < 2 || affinity::process_parallelism() < 2 || env_usize("MXNET_KVSTORE_REDUCTION_NTHREADS").is_some() {
            return;
        }
        let seen = std::thread::spawn(move || {
            assert!(affinity::pin_current_thread(all[0]));
            // Read first on a pinned thread, the configuration still counts the process's CPUs.
            assert_eq!(ReduceConfig::get().threads, affinity::process_parallelism());
            let seen = Mutex::new(Vec::new());
            let mut dst = vec![0u8; ReduceConfig::get().bigarray_bound.max(2 * 4096) * 2];
            for_parts(&mut dst, 2, |offset, _| seen.lock().push((offset, affinity::allowed_cpus())));
            let mut seen = seen.into_inner();
            seen.sort();
            (seen, affinity::allowed_cpus())
        })
        .join()
        .unwrap();
        let (parts, after) = seen;
        assert_eq!(parts.len(), 2);
        // The pinned thread runs the first part; its helper may use every CPU of the process.
        assert_eq!(parts[1].1, affinity::process_cpus());
        assert_eq!(after, vec![affinity::process_cpus()[0]], "pinned again afterwards");
    }
}
