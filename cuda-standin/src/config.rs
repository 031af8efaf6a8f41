//! The stand-in's configuration, read once from `CUDA_STANDIN_*` environment variables
//! (documented in docs/gpu-standin.md).

use once_cell::sync::Lazy;
use std::time::Duration;

pub struct Config {
    /// `CUDA_STANDIN_DEVICES`: number of devices (default 2; 0 = a driver with no device).
    pub devices: usize,
    /// `CUDA_STANDIN_MEMORY`: bytes of device memory per device (default 1 GiB).
    pub memory: u64,
    /// `CUDA_STANDIN_DRIVER_VERSION`: what cuDriverGetVersion answers (default 12080).
    pub driver_version: i32,
    /// `CUDA_STANDIN_DELAY_US`: a pause before every stream operation (default 0).
    pub delay: Duration,
}

fn var<T: std::str::FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Ok(text) => text.trim().parse().unwrap_or_else(|_| {
            eprintln!("cuda-standin: ignoring {name}={text:?} (not a number)");
            default
        }),
        Err(_) => default,
    }
}

static CONFIG: Lazy<Config> = Lazy::new(|| Config {
    devices: var("CUDA_STANDIN_DEVICES", 2usize),
    memory: var("CUDA_STANDIN_MEMORY", 1u64 << 30),
    driver_version: var("CUDA_STANDIN_DRIVER_VERSION", 12080i32),
    delay: Duration::from_micros(var("CUDA_STANDIN_DELAY_US", 0u64)),
});

pub fn config() -> &'static Config {
    &CONFIG
}
