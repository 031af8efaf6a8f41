"""Hosted mode checks KVStore handles as native mode does: a freed handle is refused (-1, with
the reason in MXGetLastError), also after a new store may have taken its slot or address, and
a made-up handle is refused; nothing crashes. Run in hosted mode only."""
import ctypes
import sys

import mxnet as mx
from mxnet.base import _LIB, c_str

KVStoreHandle = ctypes.c_void_p


def create(name):
    h = KVStoreHandle()
    assert _LIB.MXKVStoreCreate(c_str(name), ctypes.byref(h)) == 0, mx.base.py_str(_LIB.MXGetLastError())
    return h


def refused(h, why):
    out = ctypes.c_char_p()
    rc = _LIB.MXKVStoreGetType(h, ctypes.byref(out))
    msg = mx.base.py_str(_LIB.MXGetLastError())
    if rc != -1 or why not in msg:
        print(f"FAILED: MXKVStoreGetType({h.value:#x}) answered {rc}, {msg!r}; expected -1 with {why!r}")
        sys.exit(1)


first = create("local")
assert _LIB.MXKVStoreFree(first) == 0
refused(first, "already freed")
assert _LIB.MXKVStoreFree(first) == -1, "a second free must be refused"
second = create("device")
refused(first, "already freed")
out = ctypes.c_char_p()
assert _LIB.MXKVStoreGetType(second, ctypes.byref(out)) == 0 and out.value == b"device"
refused(KVStoreHandle(0x12345670), "KVStoreHandle")
assert _LIB.MXKVStoreFree(second) == 0
print("hosted KVStore handles: freed, reused and made-up handles refused")
