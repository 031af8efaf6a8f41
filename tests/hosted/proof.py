"""Hosted-mode proofs, run in hosted mode (and, for the contrast, on pure MXNet):
- the store is libkvstore's: a push of a wrong shape is refused with libkvstore's message,
  where pure MXNet's local store silently replaces the value;
- ordering by the host's engine: a push runs after the ops producing its values; a host
  write of a pushed array waits for the push's read; a host reader waits for a pending pull;
  an updater reading what it receives waits for the pushed value's producer.
usage: proof.py hosted|pure
"""
import sys

import mxnet as mx
import numpy as np

mode = sys.argv[1]
kv = mx.kv.create("local")
kv.init(3, mx.nd.ones((2, 3)))
try:
    kv.push(3, mx.nd.ones((4, 5)))
    replaced = mx.nd.zeros((4, 5))
    kv.pull(3, out=replaced)         # pure MXNet: the stored value is now the (4,5) push
    outcome = "accepted: the stored value became shape (4,5), sum %g" % replaced.sum().asscalar()
except mx.base.MXNetError as e:
    outcome = "refused: " + str(e).splitlines()[0]
print("wrong-shape push:", outcome)
if mode == "hosted":
    assert "shape mismatch for key 3: the stored value has shape (2,3), the pushed value (4,5)" in outcome, outcome
else:
    assert outcome == "accepted: the stored value became shape (4,5), sum 20", outcome

n = 512
kv.init(4, mx.nd.zeros((n, n)))
# 1. A push runs after its producers: the values come out of a long chain of matrix products.
a = mx.nd.ones((n, n)) / n
b = a
for _ in range(60):
    b = mx.nd.dot(b, a)          # every product of these is again ones/n
c = b * 3
kv.push(4, [b, c])               # queued behind the chain
out = mx.nd.zeros((n, n))
kv.pull(4, out=out)
assert np.allclose(out.asnumpy(), 4.0 / n), out.asnumpy()[0, :3]
print("push after producers: ok")

# 2. A host write of a pushed array waits for the push's read.
src = mx.nd.ones((n, n)) * 5
kv.push(4, [src, src])
src[:] = 0                       # must not be seen by the pending push
kv.pull(4, out=out)
assert np.allclose(out.asnumpy(), 10.0), out.asnumpy()[0, :3]
print("host write waits for the push's read: ok")

# 3. A host reader waits for a pending pull.
kv.push(4, [mx.nd.ones((n, n)) * 2, mx.nd.ones((n, n)) * 2])
out2 = mx.nd.zeros((n, n))
kv.pull(4, out=out2)
s = out2.sum().asscalar()        # a host op reading the pulled array
assert s == 4.0 * n * n, s
print("host reader waits for the pull: ok")

# 4. row_sparse: a push of row_sparse values queued behind its producers sums them (rows: the
# union), and a row_sparse_pull whose second pair is bad is refused before anything is
# written: the first output keeps its rows.
rows = 6
kv.init(5, mx.nd.zeros((rows, 2)).tostype("row_sparse"))
g = mx.nd.array([[1, 1], [0, 0], [2, 2], [0, 0], [0, 0], [0, 0]])
for _ in range(30):
    g = g * 1                    # a chain the push must wait for
kv.push(5, [g.tostype("row_sparse"), (g * 10).tostype("row_sparse")])
first = mx.nd.array([[7, 7]] + [[0, 0]] * (rows - 1)).tostype("row_sparse")
ids = mx.nd.array([2, 0, 2])
try:
    kv.row_sparse_pull(5, out=[first, mx.nd.zeros((rows, 2))], row_ids=[ids, ids])
    raise AssertionError("a row_sparse_pull into a dense output was accepted")
except mx.base.MXNetError as e:
    assert "Expected row_sparse storage type for row_sparse_pull values" in str(e), e
assert first.indices.asnumpy().tolist() == [0] and first.data.asnumpy().tolist() == [[7, 7]], first
kv.row_sparse_pull(5, out=first, row_ids=ids)
assert first.indices.asnumpy().tolist() == [0, 2], first.indices
assert first.data.asnumpy().tolist() == [[11, 11], [22, 22]], first.data
print("row_sparse push and row_sparse_pull (a bad pair changes nothing): ok")

# 5. An updater that reads what it receives waits for the pushed value's producer, also where
# the store hands it the one pushed value itself (no sum in between).
seen = []


def read_then_add(key, recv, local):
    seen.append(float(recv.asnumpy()[0, 0]))
    local[:] = local + recv


kv5 = mx.kv.create("local")
kv5._set_updater(read_then_add)
kv5.init(5, mx.nd.zeros((n, n)))
b = a
for _ in range(60):
    b = mx.nd.dot(b, a)
kv5.push(5, b * n)               # ones, once the chain is done
out5 = mx.nd.zeros((n, n))
kv5.pull(5, out=out5)
assert seen == [1.0], seen
assert np.allclose(out5.asnumpy(), 1.0), out5.asnumpy()[0, :3]
print("an updater reading a pushed value waits for its producer: ok")
