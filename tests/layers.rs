//! The floors of `src/`: no import cycle between the top-level modules, nor between the files
//! of one directory. A module may use the ones below it (FFI -> store -> backends -> arrays and
//! kernels -> engine -> ground floor), never one that uses it back. References are found
//! textually (`crate::m`, `super::m`), test modules and comments left out.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The code of a file without comments and without its `#[cfg(test)]` module.
fn code(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    let mut out = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("#[cfg(test)]") && lines.peek().is_some_and(|l| l.trim_start().starts_with("mod tests")) {
            break;
        }
        let line = line.split("//").next().unwrap_or("");
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// Names following `prefix` in `code` (`crate::` gives the modules used).
fn names_after(code: &str, prefix: &str) -> BTreeSet<String> {
    code.match_indices(prefix)
        .filter(|(i, _)| !code[..*i].ends_with('$') && !code[..*i].ends_with(|c: char| c.is_alphanumeric() || c == '_'))
        .map(|(i, _)| code[i + prefix.len()..].chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect())
        .collect()
}

/// A cycle in `graph`, if there is one.
fn cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        n: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        match state.get(n) {
            Some(2) => return None,
            Some(1) => {
                let start = path.iter().position(|p| p == n).unwrap_or(0);
                let mut c = path[start..].to_vec();
                c.push(n.to_string());
                return Some(c);
            }
            _ => {}
        }
        state.insert(n.to_string(), 1);
        path.push(n.to_string());
        for m in graph.get(n).into_iter().flatten() {
            if let Some(c) = visit(m, graph, state, path) {
                return Some(c);
            }
        }
        path.pop();
        state.insert(n.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    graph.keys().find_map(|n| visit(n, graph, &mut state, &mut Vec::new()))
}

#[test]
fn no_import_cycle_between_top_level_modules_or_sibling_files() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let top_level: BTreeSet<String> = std::fs::read_dir(&src)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir() || p.file_name().is_some_and(|n| n != "lib.rs"))
        .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
        .collect();
    let mut modules: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    // Per directory: file module -> sibling file modules it names.
    let mut siblings: BTreeMap<PathBuf, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for file in &files {
        let rel = file.strip_prefix(&src).unwrap();
        let Some(top) = rel.components().next().map(|c| Path::new(c.as_os_str()).file_stem().unwrap().to_string_lossy().into_owned())
        else {
            continue;
        };
        if top == "lib" {
            continue;
        }
        let code = code(file);
        let used = names_after(&code, "crate::");
        let edges = modules.entry(top.clone()).or_default();
        edges.extend(used.iter().filter(|m| top_level.contains(*m) && **m != top).cloned());

        let stem = file.file_stem().unwrap().to_string_lossy().into_owned();
        let dir = file.parent().unwrap().to_path_buf();
        if stem == "mod" || dir == src {
            continue;
        }
        let dir_module: Vec<String> =
            dir.strip_prefix(&src).unwrap().components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
        let mut named = names_after(&code, "super::");
        named.extend(names_after(&code, &format!("crate::{}::", dir_module.join("::"))));
        siblings.entry(dir).or_default().entry(stem.clone()).or_default().extend(named.into_iter().filter(|n| *n != stem));
    }
    assert!(modules.len() >= 8, "found only {:?}", modules.keys());
    if let Some(c) = cycle(&modules) {
        panic!("import cycle between top-level modules of src/: {}\n{modules:#?}", c.join(" -> "));
    }
    for (dir, graph) in &mut siblings {
        let files: BTreeSet<String> = graph.keys().cloned().collect();
        for edges in graph.values_mut() {
            edges.retain(|n| files.contains(n));
        }
        if let Some(c) = cycle(graph) {
            panic!("import cycle between the files of {}: {}", dir.display(), c.join(" -> "));
        }
    }
    // The engine and the kernels stand on the ground floor only.
    for (module, allowed) in [("base", &["error"][..]), ("engine", &["base", "error"]), ("reduce", &["base", "error"])] {
        let extra: Vec<_> = modules[module].iter().filter(|m| !allowed.contains(&m.as_str())).collect();
        assert!(extra.is_empty(), "{module} uses {extra:?}");
    }
}

/// The paths from `crate::` in `code`, use groups expanded (`crate::{a::b, c}` gives `a::b`
/// and `c`; `crate::a::{self, b}` gives `a::self` and `a::b`); a group's paths end where their
/// names do.
fn crate_paths(code: &str) -> Vec<String> {
    code.match_indices("crate::")
        .filter(|(i, _)| !code[..*i].ends_with('$') && !code[..*i].ends_with(|c: char| c.is_alphanumeric() || c == '_'))
        .flat_map(|(i, p)| use_tree(&code[i + p.len()..], "").0)
        .collect()
}

/// The paths of the use tree at the start of `s`, each prefixed by `prefix`, and where the
/// tree ends in `s`.
fn use_tree(s: &str, prefix: &str) -> (Vec<String>, usize) {
    let mut path = prefix.to_string();
    let mut i = 0;
    loop {
        i += s[i..].len() - s[i..].trim_start().len();
        let name: String = s[i..].chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        i += name.len();
        path.push_str(&name);
        let rest = s[i..].trim_start();
        if let Some(after) = rest.strip_prefix("::") {
            i = s.len() - after.len();
            path.push_str("::");
            continue;
        }
        if let Some(mut group) = rest.strip_prefix('{') {
            let mut paths = Vec::new();
            loop {
                let (inner, used) = use_tree(group, &path);
                paths.extend(inner);
                let rest = group[used..].trim_start();
                let rest = rest.strip_prefix(',').unwrap_or(rest).trim_start();
                if let Some(after) = rest.strip_prefix('}') {
                    return (paths, s.len() - after.len());
                }
                if rest.len() == group.len() {
                    // Not a use tree after all: nothing more to read.
                    return (paths, s.len() - rest.len());
                }
                group = rest;
            }
        }
        return (vec![path], i);
    }
}

/// The paths from `crate::` and from `super::` (resolved against `module`, the file's module
/// path from the crate root: `["backend", "host"]` for `src/backend/host/mod.rs`) in `code`,
/// use groups expanded, each from the crate root.
fn resolved_paths(code: &str, module: &[String]) -> Vec<String> {
    let mut out = crate_paths(code);
    for (i, _) in code.match_indices("super::") {
        let before = &code[..i];
        if before.ends_with("::") || before.ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == '$') {
            continue;
        }
        let mut rest = &code[i..];
        let mut up = 0;
        while let Some(after) = rest.strip_prefix("super::") {
            up += 1;
            rest = after.trim_start();
        }
        let Some(base) = module.len().checked_sub(up) else { continue };
        let prefix: String = module[..base].iter().map(|m| format!("{m}::")).collect();
        out.extend(use_tree(rest, &prefix).0);
    }
    out
}

/// The module path of a file of `src/` (`src/backend/host/copy.rs`: `backend::host::copy`).
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap();
    let mut parts: Vec<String> = rel.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
    let last = parts.pop().unwrap();
    let stem = last.trim_end_matches(".rs");
    if stem != "mod" && stem != "lib" {
        parts.push(stem.to_string());
    }
    parts
}

/// The backends are siblings under the execution seam (`src/backend/mod.rs` decides which one
/// runs a job): no backend names another (`crate::backend::gpu`, `super::gpu`,
/// `super::super::host`, ... in any file of its directory, use groups expanded; comments and
/// test modules left out), and the host backend knows nothing of GPUs (it names neither
/// `crate::gpu` nor `cudarc`).
#[test]
fn sibling_backends_do_not_name_each_other() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let backends: Vec<String> = std::fs::read_dir(src.join("backend"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert!(backends.contains(&"host".to_string()) && backends.contains(&"gpu".to_string()), "found {backends:?}");
    let mut found = Vec::new();
    for backend in &backends {
        let mut files = Vec::new();
        rust_files(&src.join("backend").join(backend), &mut files);
        assert!(!files.is_empty());
        for file in files.iter().filter(|f| f.file_name().is_some_and(|n| n != "tests.rs")) {
            let code = code(file);
            let shown = file.strip_prefix(Path::new(env!("CARGO_MANIFEST_DIR"))).unwrap().display().to_string();
            for path in resolved_paths(&code, &module_of(&src, file)) {
                for other in backends.iter().filter(|o| *o != backend) {
                    let named = format!("backend::{other}");
                    if path == named || path.starts_with(&format!("{named}::")) {
                        found.push(format!("{shown}: crate::{path}"));
                    }
                }
                if backend == "host" && (path == "gpu" || path.starts_with("gpu::")) {
                    found.push(format!("{shown}: crate::{path}"));
                }
            }
            if backend == "host" && code.contains("cudarc") {
                found.push(format!("{shown}: cudarc"));
            }
        }
    }
    assert!(found.is_empty(), "backends naming a sibling backend (the seam, src/backend/mod.rs, picks one):\n{}", found.join("\n"));
}

#[test]
fn super_paths_resolve_against_the_files_module() {
    let module: Vec<String> = ["backend", "host", "copy"].iter().map(|s| s.to_string()).collect();
    let code = "use super::{bytes, x::Y};\nuse super::super::{gpu::GPU, Backend};\nlet a = crate::backend::gpu::f();\nfoo::super::z";
    assert_eq!(
        resolved_paths(code, &module),
        ["backend::gpu::f", "backend::host::bytes", "backend::host::x::Y", "backend::gpu::GPU", "backend::Backend"]
    );
    let src = Path::new("/r/src");
    assert_eq!(module_of(src, Path::new("/r/src/backend/host/mod.rs")), ["backend", "host"]);
    assert_eq!(module_of(src, Path::new("/r/src/backend/gpu/copy.rs")), ["backend", "gpu", "copy"]);
}

/// The store plans, the backends execute (`src/backend/mod.rs`): no file of `src/store/` names
/// a kernel, so a store runs on whichever backend its context's is. The rule, textual, on each
/// file's code as above (comments and its `#[cfg(test)] mod tests` left out, and `tests.rs`
/// files, which are test modules, too):
/// - no path from `crate::` (use groups expanded) to `reduce`, `compression` or `gpu` (the
///   kernels), nor to `backend::host` or `backend::gpu` (the backends themselves: a store
///   reaches one by context, `backend::for_context`); the compression's parameter types, which
///   a store does keep, are `crate::backend`'s re-exports;
/// - no `cudarc` anywhere;
/// - no call of anything named `quantize`, `dequantize` or `reduce` (written `.name(` or
///   `::name(`): the compression's kernels are methods of its parameter type, so naming the
///   type is allowed and calling them is not. (The store has no other `reduce` to call; an
///   iterator's is spelt `fold` there.)
#[test]
fn no_store_module_names_a_kernel() {
    // The store's modules, and hosted mode's: it serves the host's arrays with the one store,
    // whose sums and compression run through the backends.
    let mut files = Vec::new();
    for dir in ["src/store", "src/hosted"] {
        let before = files.len();
        rust_files(&Path::new(env!("CARGO_MANIFEST_DIR")).join(dir), &mut files);
        assert!(files.len() - before >= 8, "found only {files:?} in {dir}");
    }
    let kernel_modules = ["reduce", "compression", "gpu", "backend::host", "backend::gpu"];
    let kernel_calls = ["quantize(", "dequantize(", "reduce("];
    let mut found = Vec::new();
    for file in files.iter().filter(|f| f.file_name().is_some_and(|n| n != "tests.rs")) {
        let code = code(file);
        let shown = file.strip_prefix(Path::new(env!("CARGO_MANIFEST_DIR"))).unwrap().display();
        for path in crate_paths(&code) {
            if kernel_modules.iter().any(|m| path == *m || path.starts_with(&format!("{m}::"))) {
                found.push(format!("{shown}: crate::{path}"));
            }
        }
        if code.contains("cudarc") {
            found.push(format!("{shown}: cudarc"));
        }
        for call in kernel_calls {
            for (i, _) in code.match_indices(call) {
                if code[..i].ends_with('.') || code[..i].ends_with("::") {
                    found.push(format!("{shown}: a call of {}", &call[..call.len() - 1]));
                }
            }
        }
    }
    assert!(found.is_empty(), "store modules naming kernels (reach them through crate::backend):\n{}", found.join("\n"));
}

#[test]
fn crate_paths_expand_use_groups() {
    let code = "use crate::{reduce::{self, sparse,}, base::DType};\nuse crate::compression::*;\nlet x = crate::backend::for_context(c);\nfoo_crate::reduce";
    assert_eq!(crate_paths(code), ["reduce::self", "reduce::sparse", "base::DType", "compression::", "backend::for_context"]);
}

#[test]
fn hosted_mode_uses_only_the_stores_public_face() {
    // Hosted mode serves the host's arrays with the one store; it may name what any user of
    // the store names (the store, its keys and updaters, and the distributed roles, the server
    // controller, the job's abort and the store names), never the planner, the comms or the
    // dist internals.
    let public = ["KVStore", "Keys", "IntUpdater", "StrUpdater", "Updaters", "dist::Role", "dist::Controller", "dist::abort_job", "dist::dist_mode"];
    let hosted = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/hosted");
    let mut files = Vec::new();
    rust_files(&hosted, &mut files);
    assert!(files.len() >= 5, "found only {files:?}");
    let mut found = Vec::new();
    for file in &files {
        let shown = file.strip_prefix(Path::new(env!("CARGO_MANIFEST_DIR"))).unwrap().display().to_string();
        for path in crate_paths(&code(file)) {
            let Some(inner) = path.strip_prefix("store::") else { continue };
            if !public.iter().any(|p| inner == *p || inner.starts_with(&format!("{p}::"))) {
                found.push(format!("{shown}: crate::{path}"));
            }
        }
    }
    assert!(found.is_empty(), "hosted modules reaching into the store's internals:\n{}", found.join("\n"));
}
