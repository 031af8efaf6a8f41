#!/usr/bin/env python3
"""Generates src/ops/catalog.rs: the metadata of every operator libkvstore registers.

The interface facts (names, aliases, argument names and their type strings, key_var_num_args)
are read from the reference libmxnet.so, so that code generators (Python, Perl, cpp-package's
op.h) see the signatures MXNet 1.9.1 reports. The prose is libkvstore's own: the op and
argument descriptions below, never MXNet's text.

usage: scripts/gen-op-catalog.py [--check] [<reference libmxnet.so> [<python-import-op-names.txt>]]
  defaults: $MXNET_LIBRARY or what scripts/reference-mxnet.sh prints, and the list committed in
  bindings/. --check writes nothing and fails if src/ops/catalog.rs is not what it would write.
"""
import ctypes, os, pathlib, re, subprocess, sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
args = [a for a in sys.argv[1:] if a != "--check"]
CHECK = "--check" in sys.argv[1:]
lib_path = args[0] if args else os.environ.get("MXNET_LIBRARY") or subprocess.run(
    [str(ROOT / "scripts/reference-mxnet.sh")], check=True, capture_output=True, text=True).stdout.strip()
names_path = pathlib.Path(args[1]) if len(args) > 1 else ROOT / "bindings/python-import-op-names.txt"
lib = ctypes.CDLL(lib_path, ctypes.RTLD_LOCAL)
import_names = re.split(r"[\s,]+", names_path.read_text().strip())

# The ops libkvstore computes (any name of each; aliases are found below).
IMPLEMENTED = """_copyto _zeros _ones _full _set_value elemwise_add elemwise_sub elemwise_mul elemwise_div
_plus_scalar _minus_scalar _rminus_scalar _mul_scalar _div_scalar _rdiv_scalar
broadcast_add broadcast_sub broadcast_mul broadcast_div cast_storage Cast sum
_slice_assign _slice_assign_scalar""".split()

# What each computed op does, in libkvstore's words.
OP_DOC = {
    "_copyto": "Copies the input into the output array, converting its dtype and context.",
    "_zeros": "An array filled with zeros.",
    "_ones": "An array filled with ones.",
    "_full": "An array filled with a given value.",
    "_set_value": "Sets every element of the output to a scalar.",
    "elemwise_add": "Elementwise sum of two arrays of the same shape.",
    "elemwise_sub": "Elementwise difference of two arrays of the same shape.",
    "elemwise_mul": "Elementwise product of two arrays of the same shape.",
    "elemwise_div": "Elementwise quotient of two arrays of the same shape.",
    "_plus_scalar": "Adds a scalar to every element.",
    "_minus_scalar": "Subtracts a scalar from every element.",
    "_rminus_scalar": "Subtracts every element from a scalar.",
    "_mul_scalar": "Multiplies every element by a scalar.",
    "_div_scalar": "Divides every element by a scalar.",
    "_rdiv_scalar": "Divides a scalar by every element.",
    "broadcast_add": "Sum of two arrays, broadcasting axes of length 1.",
    "broadcast_sub": "Difference of two arrays, broadcasting axes of length 1.",
    "broadcast_mul": "Product of two arrays, broadcasting axes of length 1.",
    "broadcast_div": "Quotient of two arrays, broadcasting axes of length 1.",
    "cast_storage": "Converts between dense (default) and row_sparse storage.",
    "Cast": "Converts the elements to another dtype.",
    "sum": "Sum of the elements over the given axes.",
    "_slice_assign": "The first array with a strided box (begin, end, step) replaced by the second array.",
    "_slice_assign_scalar": "The array with every element of a strided box (begin, end, step) set to a scalar.",
}
ARG_DOC = {
    "data": "Input array.",
    "lhs": "First input array.",
    "rhs": "Second input array.",
    "scalar": "The scalar operand.",
    "is_int": "Whether the scalar is an integer.",
    "shape": "Shape of the output.",
    "ctx": "Context of the output, such as cpu(0).",
    "dtype": "Element type of the output.",
    "value": "Value of every element.",
    "src": "Value written to every element.",
    "stype": "Storage type of the output.",
    "axis": "Axes to reduce; all of them when empty.",
    "keepdims": "Keep reduced axes, with length 1.",
    "exclude": "Reduce every axis except those in axis.",
    "begin": "First index of the box on each leading axis (None: the axis' start; negative counts from the end).",
    "end": "End of the box on each leading axis, exclusive (None: the axis' end; negative counts from the end).",
    "step": "Step on each leading axis (default 1; negative walks backwards).",
}
NAME_ONLY = "Not computed by libkvstore (calls answer \"not supported by libkvstore: NAME\"); registered so that the frontends raise instead of installing do-nothing stubs."

u32 = ctypes.c_uint32
def all_names():
    n, arr = u32(), ctypes.POINTER(ctypes.c_char_p)()
    assert lib.MXListAllOpNames(ctypes.byref(n), ctypes.byref(arr)) == 0
    return [arr[i].decode() for i in range(n.value)]

def handle(name):
    h = ctypes.c_void_p()
    if lib.NNGetOpHandle(name.encode(), ctypes.byref(h)) != 0 or not h.value:
        return None   # not an op of the reference: registered by name only
    return h.value

def info(h):
    name, desc, kv, rt = (ctypes.c_char_p() for _ in range(4))
    n = u32()
    an, at, ad = (ctypes.POINTER(ctypes.c_char_p)() for _ in range(3))
    assert lib.MXSymbolGetAtomicSymbolInfo(ctypes.c_void_p(h), ctypes.byref(name), ctypes.byref(desc),
        ctypes.byref(n), ctypes.byref(an), ctypes.byref(at), ctypes.byref(ad), ctypes.byref(kv), ctypes.byref(rt)) == 0
    args = [(an[i].decode(), at[i].decode()) for i in range(n.value)]
    return name.value.decode(), args, (kv.value or b"").decode()

by_handle = {}
for nm in all_names():
    by_handle.setdefault(handle(nm), []).append(nm)

wanted = []
# Every other op of the reference too, by name only: the Python package installs do-nothing
# stubs for names the library does not list, so listing them all makes such calls raise
# "not supported by libkvstore: NAME" instead of silently doing nothing.
for nm in IMPLEMENTED + import_names + sorted(all_names()):
    h = handle(nm) or nm
    if h not in [w[0] for w in wanted]:
        wanted.append((h, nm in IMPLEMENTED))

def rs(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


out = ["//! Generated by scripts/gen-op-catalog.py: do not edit. Signatures (names, argument names and type",
       "//! strings) as the reference libmxnet.so 1.9.1 reports them; descriptions are libkvstore's own.",
       "//! What each registered operator reports to the frontends' code generators.", "",
       "use super::info::{ArgInfo, OpInfo};", "", "pub(super) static CATALOG: &[OpInfo] = &["]
for h, implemented in wanted:
    if isinstance(h, str):
        name, args, kv = h, [], ""
    else:
        name, args, kv = info(h)
    desc = OP_DOC[name] if implemented else NAME_ONLY
    docs = [ARG_DOC[a[0]] if implemented else "" for a in args]
    aliases = sorted(a for a in by_handle.get(h, [name]) if a != name)
    out.append("    OpInfo {")
    out.append(f"        name: {rs(name)},")
    out.append(f"        aliases: &[{', '.join(rs(a) for a in aliases)}],")
    out.append(f"        description: {rs(desc)},")
    out.append("        args: &[")
    for a, doc in zip(args, docs):
        out.append(f"            ArgInfo {{ name: {rs(a[0])}, type_info: {rs(a[1])}, description: {rs(doc)} }},")
    out.append("        ],")
    out.append(f"        key_var_num_args: {rs(kv)},")
    out.append("    },")
out.append("];")
text = "\n".join(out) + "\n"
target = ROOT / "src/ops/catalog.rs"
if CHECK:
    if target.read_text() != text:
        sys.exit("src/ops/catalog.rs is stale: run scripts/gen-op-catalog.py")
    print("src/ops/catalog.rs is fresh")
    sys.exit(0)
target.write_text(text)
print(len(wanted), "ops,", sum(len(by_handle.get(h, [h])) for h, _ in wanted), "names")
