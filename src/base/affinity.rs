//! Where threads run: the CPUs the calling thread may use, and restricting it to one of them.
//! A thread inherits its spawner's mask, so a pinned thread lets go of its pin while it spawns
//! (the helpers of a pinned worker's op must run beside it, not on its CPU).

use std::cell::Cell;
use std::sync::OnceLock;

thread_local! {
    /// The CPU the calling thread is pinned to by [`pin_current_thread`].
    static PINNED_TO: Cell<Option<usize>> = const { Cell::new(None) };
}

/// The CPUs of the process: the mask of the first thread that asks (the engine asks as it
/// starts, before it pins any worker).
pub(crate) fn process_cpus() -> &'static [usize] {
    static CPUS: OnceLock<Vec<usize>> = OnceLock::new();
    CPUS.get_or_init(allowed_cpus)
}

/// `std::thread::available_parallelism` (1 where unknown) as the first thread that asks saw
/// it: the engine asks as it starts, before it pins a worker, whose own answer would be 1.
pub(crate) fn process_parallelism() -> usize {
    static N: OnceLock<usize> = OnceLock::new();
    *N.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// The CPUs the calling thread may run on (its affinity mask, which threads it spawns
/// inherit), ascending; empty where the system does not say.
pub(crate) fn allowed_cpus() -> Vec<usize> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: a zeroed cpu_set_t is a valid empty set.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: `set` is a live cpu_set_t of the size passed; pid 0 is the calling thread.
        if unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) } != 0 {
            return Vec::new();
        }
        // SAFETY: CPU_ISSET reads `set` within its size (cpu < CPU_SETSIZE).
        (0..libc::CPU_SETSIZE as usize).filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) }).collect()
    }
    #[cfg(not(target_os = "linux"))]
    Vec::new()
}

/// Restricts the calling thread to `cpu`; false where the system refuses (a CPU outside the
/// process's set, or offline), and the thread then keeps the CPUs it had.
pub(crate) fn pin_current_thread(cpu: usize) -> bool {
    let pinned = set_current_thread(&[cpu]);
    if pinned {
        PINNED_TO.with(|p| p.set(Some(cpu)));
    }
    pinned
}

/// While this lives, a pinned calling thread may run on the process's CPUs, and so may the
/// threads it spawns meanwhile; dropped, the thread is pinned again.
pub(crate) struct Unpinned(Option<usize>);

/// Lets go of the calling thread's pin (if any) until the result is dropped.
pub(crate) fn unpinned() -> Unpinned {
    let pin = PINNED_TO.with(Cell::get);
    Unpinned(pin.filter(|_| set_current_thread(process_cpus())))
}

impl Drop for Unpinned {
    fn drop(&mut self) {
        if let Some(cpu) = self.0 {
            set_current_thread(&[cpu]);
        }
    }
}

/// Restricts the calling thread to `cpus` (at least one, all below CPU_SETSIZE); false where
/// refused, and the thread then keeps the CPUs it had.
fn set_current_thread(cpus: &[usize]) -> bool {
    #[cfg(target_os = "linux")]
    {
        if cpus.is_empty() || cpus.iter().any(|&cpu| cpu >= libc::CPU_SETSIZE as usize) {
            return false;
        }
        // SAFETY: a zeroed cpu_set_t is a valid empty set.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        for &cpu in cpus {
            // SAFETY: cpu < CPU_SETSIZE (checked above), so CPU_SET writes within `set`.
            unsafe { libc::CPU_SET(cpu, &mut set) };
        }
        // SAFETY: `set` is a live cpu_set_t of the size passed; pid 0 is the calling thread.
        unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0 }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = cpus;
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_pinned_to_an_allowed_cpu_may_run_only_there() {
        let allowed = allowed_cpus();
        assert!(!allowed.is_empty(), "the affinity mask is readable on Linux");
        let last = *allowed.last().unwrap();
        let seen = std::thread::spawn(move || (pin_current_thread(last), allowed_cpus())).join().unwrap();
        assert_eq!(seen, (true, vec![last]));
        // The spawning thread keeps its own mask.
        assert_eq!(allowed_cpus(), allowed);
    }

    #[test]
    fn threads_spawned_while_unpinned_get_the_process_cpus_and_the_pin_comes_back() {
        let all = process_cpus().to_vec();
        assert!(all.len() >= 2, "this test needs two CPUs");
        let first = all[0];
        let (inherited, spawned_unpinned, own_while, own_after) = std::thread::spawn(move || {
            assert!(pin_current_thread(first));
            let inherited = std::thread::spawn(allowed_cpus).join().unwrap();
            let wide = unpinned();
            let own_while = allowed_cpus();
            let spawned_unpinned = std::thread::spawn(allowed_cpus).join().unwrap();
            drop(wide);
            (inherited, spawned_unpinned, own_while, allowed_cpus())
        })
        .join()
        .unwrap();
        assert_eq!(inherited, vec![first], "a thread inherits its spawner's mask");
        assert_eq!(spawned_unpinned, all);
        assert_eq!(own_while, all);
        assert_eq!(own_after, vec![first]);
        // An unpinned thread's mask is left alone.
        let before = allowed_cpus();
        drop(unpinned());
        assert_eq!(allowed_cpus(), before);
    }

    #[test]
    fn a_cpu_beyond_the_set_size_is_refused() {
        let before = allowed_cpus();
        assert!(!pin_current_thread(usize::MAX));
        assert_eq!(allowed_cpus(), before);
    }
}
