//! Which vector extensions the CPU has, for the kernels that pick a wider loop at run time.
//! The build targets the x86_64 baseline (SSE2) so the library runs everywhere.

/// Whether the CPU supports AVX2 (cached by the standard library after the first query).
#[cfg(target_arch = "x86_64")]
#[inline]
pub(crate) fn has_avx2() -> bool {
    std::arch::is_x86_feature_detected!("avx2")
}
