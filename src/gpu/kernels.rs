//! The CUDA C sources of `kernels/`, embedded at build time, and their compilation with NVRTC:
//! per device at first use, for the device's own architecture (CUBIN, or PTX when NVRTC does
//! not know it), cached for the process.

use super::nvrtc::{Compiled, Nvrtc, Target};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;

/// Prepended to every source: element types and MXNet's arithmetic on them.
pub const PRELUDE: &str = include_str!("../../kernels/prelude.cuh");

/// Every compilation unit of `kernels/`, by file name. A test checks that this list and
/// the directory agree.
pub const SOURCES: [(&str, &str); 5] = [
    ("sum.cu", include_str!("../../kernels/sum.cu")),
    ("copy.cu", include_str!("../../kernels/copy.cu")),
    ("compress.cu", include_str!("../../kernels/compress.cu")),
    ("row_sparse.cu", include_str!("../../kernels/row_sparse.cu")),
    ("fused.cu", include_str!("../../kernels/fused.cu")),
];

/// The source NVRTC compiles for `file`: the prelude, then the file, with a line directive so
/// that diagnostics name the file's own lines.
pub fn full_source(file: &str, body: &str) -> String {
    format!("{PRELUDE}\n#line 1 \"{file}\"\n{body}")
}

/// NVRTC 12.9's warning for sm_70/sm_72.
const DEPRECATED_ARCH_WARNING: &str =
    "nvrtc: warning: Architectures prior to '<compute/sm>_75' are deprecated and may be removed in a future release";

/// Compiles one unit; any diagnostic, a warning included, is an error: the kernels must
/// compile cleanly everywhere they are built.
pub fn compile_unit(nvrtc: &Nvrtc, file: &str, body: &str, target: Target) -> Result<Compiled, String> {
    let compiled = nvrtc.compile(file, &full_source(file, body), target, &[])?;
    // NVRTC 12.9 warns that architectures before sm_75 are deprecated (it has no option to
    // silence that warning alone); they still work and MXNet 1.9 supports them, so that one
    // line is dropped for them, and any other diagnostic fails.
    let arch = match target {
        Target::Cubin(a) | Target::Ptx(a) => a,
    };
    let log: Vec<&str> = compiled
        .log
        .lines()
        .filter(|l| !(arch < 75 && l.trim() == DEPRECATED_ARCH_WARNING))
        .filter(|l| !l.trim().is_empty())
        .collect();
    if !log.is_empty() {
        return Err(format!("{file} for {target:?}: NVRTC reported diagnostics:\n{}", log.join("\n")));
    }
    Ok(compiled)
}

/// The compiled images of every unit for one target.
pub struct Images {
    /// The target they were built for.
    pub target: Target,
    /// (file, image), in `SOURCES` order.
    pub units: Vec<(&'static str, Vec<u8>)>,
}

static CACHE: once_cell::sync::Lazy<Mutex<HashMap<Target, Arc<Images>>>> =
    once_cell::sync::Lazy::new(|| Mutex::new(HashMap::new()));

/// Every unit compiled for `target`, compiled once per process. Devices of one architecture
/// share the images; each device loads them into its own context.
pub fn images_for(nvrtc: &Nvrtc, target: Target) -> Result<Arc<Images>, String> {
    if let Some(hit) = CACHE.lock().get(&target) {
        return Ok(hit.clone());
    }
    // Compiled outside the lock: two threads racing compile twice, and one result is kept.
    let mut units = Vec::with_capacity(SOURCES.len());
    for (file, body) in SOURCES {
        units.push((file, compile_unit(nvrtc, file, body, target)?.image));
    }
    let images = Arc::new(Images { target, units });
    Ok(CACHE.lock().entry(target).or_insert(images).clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_of_kernels_is_embedded() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("kernels");
        let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".cu"))
            .collect();
        on_disk.sort();
        let mut embedded: Vec<String> = SOURCES.iter().map(|(f, _)| f.to_string()).collect();
        embedded.sort();
        assert_eq!(on_disk, embedded, "kernels/*.cu and kernels::SOURCES differ");
        for (file, body) in SOURCES {
            let on_disk = std::fs::read_to_string(dir.join(file)).unwrap();
            assert_eq!(on_disk, body, "{file} is stale in the build");
        }
    }
}
