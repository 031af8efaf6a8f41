//! GPU support. No machine of this project has a GPU; until the CUDA reduction lands, a GPU
//! context answers a clear error instead of pretending.

use crate::error::Result;
use once_cell::sync::Lazy;

/// Why GPU memory cannot be used here: the driver could not be loaded, or GPU values are not
/// implemented yet in this build.
static UNAVAILABLE_REASON: Lazy<String> = Lazy::new(|| {
    // SAFETY: loading the CUDA driver runs its initialisers, which is exactly what any CUDA
    // program does; the library is dropped again at once and none of its symbols is used.
    match unsafe { libloading::Library::new("libcuda.so.1") } {
        Ok(_) => "GPU values are not supported by this build of libkvstore yet".to_string(),
        Err(_) => "no CUDA device: the CUDA driver (libcuda.so.1) could not be loaded".to_string(),
    }
});

/// Number of usable GPUs: always 0 for now.
pub fn device_count() -> i32 {
    0
}

/// Succeeds when `gpu(dev_id)` can hold values.
pub fn require_device(dev_id: i32) -> Result<()> {
    crate::bail!("gpu({dev_id}) is not available: {}", *UNAVAILABLE_REASON)
}
