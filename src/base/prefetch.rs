//! Software prefetch, for loops that walk thousands of small objects scattered in memory (the
//! engine's variables, one per array): asking for an object's line a few iterations ahead
//! overlaps the cache misses a locked instruction would otherwise take one at a time.

/// Hints that the cache line holding `p` will be used soon. Never faults, whatever `p` is.
#[inline(always)]
pub(crate) fn prefetch_line<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: SSE is part of x86_64; a prefetch is a hint that never faults and does not read
    // architecturally, so any address is fine.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p as *const i8)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Hints that the cache line holding `p` will soon be written by a locked instruction (a
/// reference count, a lock word) that another core wrote last: the line is asked for in the
/// exclusive state, so the write does not wait for a second transfer that takes it from the
/// other core's cache. Never faults, whatever `p` is.
#[inline(always)]
pub(crate) fn prefetch_line_for_write<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHW (0F 0D /1) is a hint that never faults and writes nothing; CPUs without
    // it execute the opcode as a NOP (it is in the reserved-NOP space on Intel and AMD).
    unsafe {
        std::arch::asm!("prefetchw byte ptr [{0}]", in(reg) p, options(nostack, preserves_flags, readonly))
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefetches_never_fault_whatever_the_address() {
        let value = 7u64;
        for p in [&value as *const u64, std::ptr::null(), usize::MAX as *const u64, 0x10 as *const u64] {
            prefetch_line(p);
            prefetch_line_for_write(p);
        }
        assert_eq!(value, 7, "a prefetch changes nothing");
    }
}
