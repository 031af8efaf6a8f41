//! Which vector extensions the kernels may use, for those that pick a wider loop at run time.
//! The build targets the x86_64 baseline (SSE2) so the library runs everywhere.

#[cfg(target_arch = "x86_64")]
use once_cell::sync::Lazy;

/// Set (to anything) to keep to the baseline loops on a CPU that has AVX2, as a CPU without it
/// would run them: the test suite runs the differential programs both ways.
#[cfg(target_arch = "x86_64")]
pub(crate) const BASELINE_ENV: &str = "KVSTORE_X86_BASELINE";

#[cfg(target_arch = "x86_64")]
static USE_AVX2: Lazy<bool> =
    Lazy::new(|| std::arch::is_x86_feature_detected!("avx2") && std::env::var_os(BASELINE_ENV).is_none());

/// Whether the AVX2 loops may run: the CPU supports AVX2 and [`BASELINE_ENV`] is not set.
#[cfg(target_arch = "x86_64")]
#[inline]
pub(crate) fn has_avx2() -> bool {
    *USE_AVX2
}
