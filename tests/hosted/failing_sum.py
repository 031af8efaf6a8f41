"""A hosted sum that fails (KVSTORE_HOSTED_TEST_FAIL_SUM=error) or panics (=panic) must reach
the host's waiters, as a failure of MXNet's own KVStore ops does: the pull's output raises
MXNetError at its wait, naming the failure, and the process goes on. Run in hosted mode only:
    python failing_sum.py STORE_TYPE EXPECTED_TEXT
"""
import sys

import mxnet as mx

store, expected = sys.argv[1], sys.argv[2]
kv = mx.kv.create(store)
shape = (4, 5)
kv.init(3, mx.nd.ones(shape))
kv.push(3, [mx.nd.ones(shape) * 2, mx.nd.ones(shape) * 3])
out = mx.nd.zeros(shape)
kv.pull(3, out=out)
try:
    out.asnumpy()
except mx.base.MXNetError as e:
    text = str(e)
    if expected not in text:
        print(f"FAILED: the wait raised, but without {expected!r}: {text[:300]}")
        sys.exit(1)
    print(f"{store}: the failed sum reached the waiter: {text.splitlines()[0][:120]}")
else:
    print(f"FAILED: {store}: the pull's output was read without error: {out.asnumpy()[0]}")
    sys.exit(1)
# The process goes on: a fresh array computes normally.
assert (mx.nd.ones((2,)) + 1).asnumpy().tolist() == [2.0, 2.0]
