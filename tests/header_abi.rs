//! The generated header against MXNet 1.9's own `c_api.h`: compiled together in C11 and
//! C++11, gcc refuses any prototype or typedef that is not type-identical. A deliberately
//! wrong prototype must be refused too, or the check proves nothing.

use std::path::{Path, PathBuf};
use std::process::Command;

/// MXNet's include directory from the reference wheel (`MXNET_LIBRARY` points at its
/// libmxnet.so), if present.
fn mxnet_include() -> Option<PathBuf> {
    let lib = std::env::var_os("MXNET_LIBRARY")?;
    let dir = Path::new(&lib).parent()?.join("include");
    dir.join("mxnet/c_api.h").exists().then_some(dir)
}

fn compile(compiler: &str, std: &str, ext: &str, source: &str, include: &Path) -> (bool, String) {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("abi");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join(format!("abi_{std}_{}.{ext}", source.len()));
    std::fs::write(&file, source).unwrap();
    let header_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("include");
    let out = Command::new(compiler)
        .args([&format!("-std={std}"), "-Wall", "-Wextra", "-Werror", "-fsyntax-only"])
        .arg("-I")
        .arg(&header_dir)
        .arg("-I")
        .arg(include)
        .arg(&file)
        .output()
        .expect("run the C compiler");
    (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
}

const BOTH: &str = "#include \"kvstore.h\"\n#include <mxnet/c_api.h>\n#include <nnvm/c_api.h>\n#include \"kvstore.h\"\nint main(void) { return 0; }\n";

#[test]
fn header_is_type_identical_to_mxnet_c_api_h() {
    let Some(include) = mxnet_include() else {
        assert!(std::env::var("KVSTORE_REQUIRE_REFERENCE").is_err(), "MXNET_LIBRARY must point at the reference libmxnet.so");
        eprintln!("skipped: reference libmxnet.so (MXNET_LIBRARY) not found");
        return;
    };
    for (compiler, std, ext) in [("cc", "c11", "c"), ("c++", "c++11", "cc")] {
        let (ok, err) = compile(compiler, std, ext, BOTH, &include);
        assert!(ok, "{std}: kvstore.h conflicts with MXNet's c_api.h:\n{err}");
    }
    // Negative control: a const-qualified key array (`const char* const*`) is a different
    // type from MXNet's `const char**`; gcc must say so.
    let wrong = BOTH.replace(
        "int main",
        "int MXKVStorePushEx(KVStoreHandle, uint32_t, const char* const*, NDArrayHandle*, int);\nint main",
    );
    let (ok, err) = compile("cc", "c11", "c", &wrong, &include);
    assert!(!ok && err.contains("conflicting types"), "the ABI check cannot detect a wrong prototype:\n{err}");
}

#[test]
fn header_compiles_alone_in_c_and_cpp() {
    let alone = "#include \"kvstore.h\"\nint main(void) { const char *e = MXGetLastError(); return e == 0; }\n";
    let empty = std::env::temp_dir();
    for (compiler, std, ext) in [("cc", "c11", "c"), ("cc", "c99", "c"), ("c++", "c++11", "cc")] {
        let (ok, err) = compile(compiler, std, ext, alone, &empty);
        assert!(ok, "{std}: the header does not compile alone:\n{err}");
    }
}

#[test]
fn every_export_runs_inside_the_panic_boundary() {
    // The exports are the generated trampolines of exports.rs; what they jump to in native
    // mode is a `pub extern "C" fn` of src/ffi/ (or a stub). MXGetLastError and NNGetLastError
    // cannot fail and return a pointer: the two implementations without the boundary.
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/ffi");
    let (mut implementations, mut boundaries) = (0, 0);
    for entry in std::fs::read_dir(src).unwrap() {
        let path = entry.unwrap().path();
        if path.file_name().is_some_and(|n| n == "exports.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        implementations += text.matches("pub extern \"C\" fn ").count() + text.matches("pub(crate) extern \"C\" fn ").count();
        boundaries += text.matches("ffi_boundary!(").count();
        // The name is derived from the enclosing function; a repeated literal could disagree.
        assert!(!text.contains("ffi_boundary!(\""), "ffi_boundary! takes no name literal any more");
    }
    // The macro's definition and its test are in boundary.rs.
    boundaries -= 3;
    assert!(implementations >= 294, "{implementations} implementations and stubs");
    assert_eq!(implementations, boundaries + 2, "every implementation but MX/NNGetLastError must use ffi_boundary!");
}

#[test]
fn every_kvstore_export_is_written_once_for_both_modes() {
    // Hosted mode serves its store through the native exports (src/ffi/kvstore.rs, via the
    // arrays seam src/ffi/served.rs): no file of src/hosted defines an MXKVStore* function.
    let hosted = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/hosted");
    let mut seen = 0;
    for entry in std::fs::read_dir(&hosted).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "rs") {
            seen += 1;
            let text = std::fs::read_to_string(&path).unwrap();
            assert!(!text.contains("extern \"C\" fn MXKVStore"), "{} defines a KVStore export of its own", path.display());
        }
    }
    assert!(seen >= 8, "found only {seen} files in src/hosted");
    let native = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/ffi/kvstore.rs")).unwrap();
    assert!(native.matches("pub extern \"C\" fn MXKVStore").count() >= 30, "the native KVStore exports");
    let calls = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/ffi/kvstore_calls.rs")).unwrap();
    assert!(calls.contains("handle::served_kvstore("), "the exports take their store through the arrays seam");
}
