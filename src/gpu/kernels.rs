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

/// The kernels a unit's source declares with `extern "C" __global__ void NAME(`: a whole name
/// (`false`), or for a kernel stamped out by a macro (`NAME_##suffix`) the part before the
/// first `##` (`true`), a prefix of every kernel it makes.
pub fn declared_kernels(body: &str) -> Vec<(&str, bool)> {
    const DECL: &str = "extern \"C\" __global__ void ";
    body.match_indices(DECL)
        .filter_map(|(at, _)| {
            let rest = &body[at + DECL.len()..];
            let name = &rest[..rest.find('(')?];
            let (head, prefix) = match name.split_once("##") {
                Some((head, _)) => (head, true),
                None => (name, false),
            };
            Some((head.trim(), prefix))
        })
        .filter(|(n, _)| !n.is_empty())
        .collect()
}

/// The unit (index into `SOURCES`) whose source declares kernel `name`: a whole name, or the
/// longest macro prefix it starts with. Loading a function from its own module only keeps the
/// driver from answering lookups with errors (which compute-sanitizer reports).
pub fn unit_of(name: &str) -> Option<usize> {
    let mut best: Option<(usize, usize)> = None;
    for (i, (_, body)) in SOURCES.iter().enumerate() {
        for (declared, prefix) in declared_kernels(body) {
            if !prefix && declared == name {
                return Some(i);
            }
            if prefix && name.starts_with(declared) && best.is_none_or(|(_, len)| declared.len() > len) {
                best = Some((i, declared.len()));
            }
        }
    }
    best.map(|(i, _)| i)
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

    #[test]
    fn every_kernel_the_library_launches_is_found_in_its_own_unit() {
        let unit = |name: &str| unit_of(name).map(|i| SOURCES[i].0);
        assert_eq!(unit("fused_sum"), Some("fused.cu"));
        assert_eq!(unit("fused_copy"), Some("fused.cu"));
        assert_eq!(unit("fused_sum_by_value"), Some("fused.cu"));
        assert_eq!(unit("fused_copy_by_value"), Some("fused.cu"));
        assert_eq!(unit("sum_float32"), Some("sum.cu"));
        assert_eq!(unit("sum_int64"), Some("sum.cu"));
        assert_eq!(unit("sum_out_float16"), Some("sum.cu"));
        assert_eq!(unit("rsp_gather"), Some("row_sparse.cu"));
        assert_eq!(unit("rsp_scatter"), Some("row_sparse.cu"));
        assert_eq!(unit("rsp_accumulate_float16"), Some("row_sparse.cu"));
        assert_eq!(unit("copy_bytes"), Some("copy.cu"));
        assert_eq!(unit("fill_int8"), Some("copy.cu"));
        assert_eq!(unit("cast_float32_to_float16"), Some("copy.cu"));
        assert_eq!(unit("quantize_2bit"), Some("compress.cu"));
        assert_eq!(unit("dequantize_1bit"), Some("compress.cu"));
        assert_eq!(unit("no_such_kernel"), None);
        // Every name a launch site spells out is declared by some unit.
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/gpu");
        for entry in std::fs::read_dir(src).unwrap() {
            let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
            for (at, _) in text.match_indices("q.launch(") {
                let line = &text[at..];
                let line = &line[..line.find('\n').unwrap_or(line.len())];
                if let Some(start) = line.find(", \"") {
                    let name = &line[start + 3..];
                    let name = &name[..name.find('"').unwrap()];
                    assert!(unit_of(name).is_some(), "kernel {name} is declared in no unit of kernels/");
                }
            }
        }
    }
}
