#!/usr/bin/env python3
"""Generates the export layer from the list of every C function MXNet 1.9.1's libmxnet.so
exports (bindings/mxnet-exports.txt, written by scripts/gen-export-list.sh):

- src/ffi/exports.rs: each of the 294 names as an exported trampoline, `jmp [slot]`, with its
  prototype read from MXNet 1.9's own headers (the header stays type-identical to c_api.h) and
  the documentation of the function behind it. A slot holds libkvstore's implementation (the
  `pub extern "C" fn` of that name in src/ffi/) or, where there is none, the stub of
  src/ffi/stubs.rs; in hosted mode (src/hosted/) the host library's function or the hosted store's.
- src/ffi/stubs.rs: a stub answering -1 ("not supported by libkvstore: NAME") for every name
  libkvstore does not implement. A stub ignores its arguments, so it needs no signature.

usage: scripts/gen-stubs.py [--check] [<mxnet include dir>]
  default include dir: the reference wheel's (beside the libmxnet.so scripts/reference-mxnet.sh
  prints). --check writes nothing and fails if either file is not what it would write.
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

HEADERS = ["mxnet/c_api.h", "nnvm/c_api.h", "mxnet/c_predict_api.h", "mxnet/c_api_test.h",
           "mxnet/runtime/c_runtime_api.h"]
src = strip_comments("".join((INC / h).read_text() for h in HEADERS))
# In no installed header (defined in MXNet's src/nnvm/tvm_bridge.cc): `TVMFunctionHandle` is a void*.
src += "MXNET_DLL int MXTVMBridge(void* pregister);"
protos = {m.group(2): (" ".join(m.group(1).split()), " ".join(m.group(3).split()))
          for m in re.finditer(r"(?:MXNET_DLL|NNVM_DLL)\s+([\w\s\*]+?)\s*\b(\w+)\s*\(([^;]*?)\)\s*;", src, re.S)}
# `typedef void *X;` / `typedef const void *X;`: handles become void pointers.
handles = {m.group(2): bool(m.group(1)) for m in re.finditer(r"typedef\s+(const\s+)?void\s*\*\s*(\w+)\s*;", src)}
# Function-pointer typedefs keep their names (written by hand in cbindgen.toml and types.rs).
callbacks = {"MXKVStoreUpdater", "MXKVStoreStrUpdater", "MXKVStoreServerController",
             "ExecutorMonitorCallback", "CachedOpMonitorCallback", "CustomOpPropCreator",
             "EngineAsyncFunc", "EngineSyncFunc", "EngineFuncParamDeleter", "PredMonitorCallback"}
scalars = {"int": "c_int", "char": "c_char", "void": "c_void", "float": "f32", "mx_float": "f32",
           "double": "f64", "uint32_t": "u32", "mx_uint": "u32", "nn_uint": "u32", "int64_t": "i64",
           "dim_t": "i64", "uint64_t": "u64", "size_t": "usize", "bool": "bool", "uint8_t": "u8",
           "int32_t": "i32",
           # c_runtime_api.h's `MXNetValue` union, only ever passed by pointer.
           "MXNetValue": "c_void"}
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
    if base is None and "unsigned" in toks:
        base = "uint32_t"    # a bare `unsigned` (MXLoadLib): uint32_t is unsigned int here
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


RETURNS = {"int": "c_int", "const char *": "*const c_char", "const char*": "*const c_char", "void": None}

names = [l.strip() for l in (ROOT / "bindings/mxnet-exports.txt").read_text().splitlines()
         if l.strip() and not l.startswith("#")]

# libkvstore's implementations: `pub extern "C" fn NAME` in src/ffi/, with their documentation.
docs = {}
for f in sorted((ROOT / "src/ffi").glob("*.rs")):
    if f.name in ("stubs.rs", "exports.rs"):
        continue
    for m in re.finditer(r'((?:[ \t]*///[^\n]*\n)*)(?:[ \t]*#\[[^\n]*\n)*[ \t]*pub extern "C" fn (\w+)', f.read_text()):
        docs[m.group(2)] = (f.stem, m.group(1))
stray = sorted(set(docs) - set(names))
if stray:
    sys.exit(f"not exported by libmxnet 1.9.1, so not in the export list: {stray}")

stubs, trampolines, slots = [], [], []
for i, name in enumerate(names):
    ret, args = protos[name]
    if ret not in RETURNS:
        sys.exit(f"{name} returns {ret}: teach scripts/gen-stubs.py its Rust type")
    rret = RETURNS[ret]
    if name in docs:
        module, doc = docs[name]
        target = f"super::{module}::{name}"
    else:
        if rret != "c_int":
            sys.exit(f"{name} returns {ret}, not int: implement it by hand in src/ffi/")
        doc = f"/// Not supported by libkvstore: answers -1 (\"not supported by libkvstore: {name}\").\n"
        stubs.append(f"""
pub(crate) extern "C" fn {name}() -> c_int {{
    ffi_boundary!({{ unsupported("{name}") }})
}}
""")
        target = f"super::stubs::{name}"
    ps = ", ".join(f"{n}: {t}" for n, t in params(args))
    arrow = f" -> {rret}" if rret else ""
    slots.append(f"    Slot::new({target} as *mut ()),\n")
    trampolines.append(f"""
{doc}#[unsafe(naked)]
#[no_mangle]
pub extern "C" fn {name}({ps}){arrow} {{
    trampoline!({i * 8})
}}
""")

stubs_rs = f"""//! Generated by scripts/gen-stubs.py from bindings/mxnet-exports.txt: do not edit.
//!
//! The functions of MXNet 1.9.1's C API that libkvstore does not implement. Each is the
//! native-mode target of its trampoline in `exports.rs` and answers -1 with a clear
//! `MXGetLastError`; it reads no argument, so it is declared without parameters (on the C ABIs
//! libkvstore supports, the caller owns the argument registers and stack).

#![allow(non_snake_case)]

use std::os::raw::c_int;

fn unsupported(name: &str) -> crate::error::Result<()> {{
    crate::bail!("not supported by libkvstore: {{name}}")
}}
""" + "".join(stubs)

exports_rs = f"""//! Generated by scripts/gen-stubs.py from bindings/mxnet-exports.txt: do not edit.
//!
//! Every C function MXNet 1.9.1's libmxnet.so exports ({len(names)}), each an exported trampoline
//! that jumps through its slot in [`SLOTS`]: in native mode to libkvstore's implementation or
//! stub, in hosted mode (`KVSTORE_HOST_LIBRARY`, src/hosted/) to the host library's function or
//! the hosted store's. A jump keeps every argument register and the stack as the caller left
//! them, so a trampoline needs no knowledge of its signature (none of these functions is
//! variadic); the prototypes here are MXNet's, for the generated header.
//! Callback typedefs used: {", ".join(sorted(used_callbacks)) or "none"}; structs: {", ".join(sorted(used_structs)) or "none"}.

#![allow(non_snake_case, unused_variables, clippy::too_many_arguments)]

use super::types::*;
use std::os::raw::{{c_char, c_int, c_void}};
use std::sync::atomic::AtomicPtr;

/// One jump target. `AtomicPtr<()>` has the layout of a plain pointer, which the trampolines read.
pub(crate) type Slot = AtomicPtr<()>;

/// The C names, in slot order.
pub(crate) const NAMES: [&str; {len(names)}] = [
{"".join(f'    "{n}",' + chr(10) for n in names)}];

/// The jump targets, in [`NAMES`] order. Not exported: the trampolines reach it PC-relative.
pub(crate) static SLOTS: [Slot; {len(names)}] = [
{"".join(slots)}];

/// The body of a trampoline: a jump through the slot at byte offset `$offset` of [`SLOTS`].
// SAFETY (both): the body of a naked function; every slot holds a function of the C ABI.
#[cfg(target_arch = "x86_64")]
macro_rules! trampoline {{
    ($offset:literal) => {{
        core::arch::naked_asm!(concat!("jmp qword ptr [rip + {{slots}} + ", $offset, "]"), slots = sym SLOTS)
    }};
}}
#[cfg(target_arch = "aarch64")]
macro_rules! trampoline {{
    ($offset:literal) => {{
        core::arch::naked_asm!(
            "adrp x16, {{slots}}",
            "add x16, x16, :lo12:{{slots}}",
            concat!("ldr x16, [x16, #", $offset, "]"),
            "br x16",
            slots = sym SLOTS
        )
    }};
}}
""" + "".join(trampolines)

outputs = {ROOT / "src/ffi/stubs.rs": stubs_rs, ROOT / "src/ffi/exports.rs": exports_rs}
if CHECK:
    stale = [str(p.relative_to(ROOT)) for p, text in outputs.items() if not p.exists() or p.read_text() != text]
    if stale:
        sys.exit(f"{', '.join(stale)} stale: run scripts/gen-stubs.py")
    print("src/ffi/stubs.rs and src/ffi/exports.rs are fresh")
    sys.exit(0)
for p, text in outputs.items():
    p.write_text(text)
print(f"{len(names)} exports, {len(names) - len(stubs)} implemented, {len(stubs)} stubs; "
      f"callbacks {sorted(used_callbacks)}; structs {sorted(used_structs)}")
