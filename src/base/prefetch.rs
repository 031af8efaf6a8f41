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
