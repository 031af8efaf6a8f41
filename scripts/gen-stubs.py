#!/usr/bin/env python3
"""Generates src/ffi/stubs.rs: every MX*/NN* function the unchanged frontends link against
(bindings/link-symbols.txt) that libkvstore does not implement, as an export answering -1
with "not supported by libkvstore: NAME". Prototypes are read from MXNet 1.9's own headers
(the reference wheel's include/), so the header stays type-identical to c_api.h.

usage: scripts/gen-stubs.py [--check] [<mxnet include dir>]
  default include dir: the reference wheel's (beside the libmxnet.so scripts/reference-mxnet.sh
  prints). --check writes nothing and fails if src/ffi/stubs.rs is not what it would write.
Rerun it after implementing one of the stubbed functions elsewhere in src/ffi/.
"""
import pathlib, re, subprocess, sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
args = [a for a in sys.argv[1:] if a != "--check"]
CHECK = "--check" in sys.argv[1:]
if args:
    INC = pathlib.Path(args[0])
else:
    lib = subprocess.run([str(ROOT / "scripts/reference-mxnet.sh")], check=True, capture_output=True, text=True).stdout.strip()
    INC = pathlib.Path(lib).parent / "include"

def strip_comments(s):
    return re.sub(r"//[^\n]*", "", re.sub(r"/\*.*?\*/", "", s, flags=re.S))

src = strip_comments((INC / "mxnet/c_api.h").read_text() + (INC / "nnvm/c_api.h").read_text())
protos = {m.group(2): (m.group(1).strip(), " ".join(m.group(3).split()))
          for m in re.finditer(r"(?:MXNET_DLL|NNVM_DLL)\s+([\w\s\*]+?)\s*\b(\w+)\s*\(([^;]*?)\)\s*;", src, re.S)}
# `typedef void *X;` / `typedef const void *X;`: handles become void pointers.
handles = {m.group(2): bool(m.group(1)) for m in re.finditer(r"typedef\s+(const\s+)?void\s*\*\s*(\w+)\s*;", src)}
# Function-pointer typedefs keep their names (written by hand in cbindgen.toml).
callbacks = {"MXKVStoreUpdater", "MXKVStoreStrUpdater", "MXKVStoreServerController",
             "ExecutorMonitorCallback", "CachedOpMonitorCallback", "CustomOpPropCreator",
             "EngineAsyncFunc", "EngineSyncFunc", "EngineFuncParamDeleter"}
scalars = {"int": "c_int", "char": "c_char", "void": "c_void", "float": "f32", "mx_float": "f32",
           "double": "f64", "uint32_t": "u32", "mx_uint": "u32", "nn_uint": "u32", "int64_t": "i64",
           "dim_t": "i64", "uint64_t": "u64", "size_t": "usize", "bool": "bool", "uint8_t": "u8",
           "int32_t": "i32"}
keywords = {"type", "ref", "in", "fn", "self", "match", "loop", "mod", "use", "impl", "move"}
used_callbacks, used_structs = set(), set()

def rust_type(c):
    """C parameter type -> Rust type that cbindgen prints back as the same C type."""
    toks = re.findall(r"\w+|\*", c)
    base_const, base, levels = False, None, []   # levels: const-ness of each pointer itself
    is_struct = False
    for t in toks:
        if t == "const":
            if levels:
                levels[-1] = True
            else:
                base_const = True
        elif t == "struct":
            is_struct = True
        elif t == "*":
            levels.append(False)
        elif t in ("unsigned", "signed"):
            pass
        else:
            base = t
    pointee_const = [base_const] + levels[:-1] if levels else []
    if base in handles:
        # X = (const) void *: one more pointer level, the handle itself is what base_const qualifies.
        pointee_const = [handles[base]] + ([base_const] + levels[:-1] if levels else [])
        levels = [base_const] + levels
        base = "void"
    if base in callbacks:
        used_callbacks.add(base)
        rust = base
    elif is_struct:
        used_structs.add(base)
        rust = base
    else:
        rust = scalars[base]
    for pc in pointee_const:
        rust = ("*const " if pc else "*mut ") + rust
    return rust

def params(args):
    out = []
    if args in ("", "void"):
        return out
    for i, p in enumerate(args.split(",")):
        p = re.sub(r"DEFAULT\([^)]*\)", "", p).strip()
        m = re.match(r"(.*?[\s\*])(\w+)$", p)
        if m and m.group(2) not in scalars and m.group(2) not in handles and m.group(2) not in callbacks:
            ctype, name = m.group(1), m.group(2)
        else:
            ctype, name = p, f"arg{i}"
        name = name + "_" if name in keywords else name
        out.append((name, rust_type(ctype)))
    return out

implemented = set()
for f in (ROOT / "src/ffi").glob("*.rs"):
    if f.name != "stubs.rs":
        implemented |= set(re.findall(r'pub extern "C" fn (\w+)', f.read_text()))
wanted = sorted({l.strip() for l in (ROOT / "bindings/link-symbols.txt").read_text().splitlines()
                 if l.strip() and not l.startswith("#")} - implemented)

body = []
for name in wanted:
    ret, args = protos[name]
    if ret != "int":
        sys.exit(f"{name} returns {ret}, not int: implement it by hand in src/ffi/")
    ps = ", ".join(f"{n}: {t}" for n, t in params(args))
    body.append(f"""
/// Not supported by libkvstore: answers -1 ("not supported by libkvstore: {name}").
#[no_mangle]
pub extern "C" fn {name}({ps}) -> c_int {{
    ffi_boundary!({{ unsupported("{name}") }})
}}
""")

header = f"""//! Generated by scripts/gen-stubs.py from MXNet 1.9's c_api.h: do not edit.
//!
//! The functions the unchanged frontends (cpp-package, Perl's SWIG wrappers, Scala's JNI
//! library) link against but libkvstore does not implement. They exist so those libraries
//! load with every symbol bound (`PERL_DL_NONLAZY`, a JVM never hitting a missing symbol,
//! C++ linking without `--gc-sections`); each answers -1 with a clear `MXGetLastError`.
//! Callback typedefs used: {", ".join(sorted(used_callbacks)) or "none"}; structs: {", ".join(sorted(used_structs)) or "none"}.

#![allow(non_snake_case, unused_variables, clippy::too_many_arguments)]

use super::types::*;
use std::os::raw::{{c_char, c_int, c_void}};

fn unsupported(name: &str) -> crate::error::Result<()> {{
    crate::bail!("not supported by libkvstore: {{name}}")
}}
"""
text = header + "".join(body)
target = ROOT / "src/ffi/stubs.rs"
if CHECK:
    if target.read_text() != text:
        sys.exit("src/ffi/stubs.rs is stale: run scripts/gen-stubs.py")
    print("src/ffi/stubs.rs is fresh")
    sys.exit(0)
target.write_text(text)
print(f"{len(wanted)} stubs; callbacks {sorted(used_callbacks)}; structs {sorted(used_structs)}")
