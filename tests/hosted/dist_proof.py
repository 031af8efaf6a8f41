"""Ordering proofs of a dist_sync store, run by every worker of a job (2 workers, 1 server):
1. a push returns before the op producing its value has run, and still sends that value: the
   producer is a custom op that waits until the push has returned (a push that waited for it
   would see the producer give up after GATE_SECONDS and send a wrong value);
2. several values pushed behind a chain of producers are summed after them, and a host write
   to a pushed value right after the push does not reach the push;
3. a host reader of a pulled array, queued right after the pull, sees the pulled value (the
   servers' sum of every worker's push), not what the store held before the pull.
Each check prints "ok" or "FAILED: why"; the exit status is the number of failures.
Workers push (rank + 1) * ...; with 2 workers the servers' sums are 3 * ....
usage: dist_proof.py  (under scripts/pslite-launch or scripts/kvstore-launch, -n 2 -s 1)
"""
import sys
import threading

import mxnet as mx
import numpy as np

GATE_SECONDS = 30
kv = mx.kv.create("dist_sync")
rank, workers = kv.rank, kv.num_workers
assert workers == 2, workers
print("rank", rank)
n = 256
failures = 0


def check(name, ok, why):
    global failures
    if ok:
        print(name + ": ok")
    else:
        failures += 1
        print(name + ": FAILED: " + why)
    sys.stdout.flush()


gate = threading.Event()
gate_opened = []


class Gated(mx.operator.CustomOp):
    """Copies its input once `gate` is set; gives up after GATE_SECONDS and adds 1000."""

    def forward(self, is_train, req, in_data, out_data, aux):
        opened = gate.wait(GATE_SECONDS)
        gate_opened.append(opened)
        self.assign(out_data[0], req[0], in_data[0] + (0 if opened else 1000))

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        raise NotImplementedError


@mx.operator.register("gated")
class GatedProp(mx.operator.CustomOpProp):
    def __init__(self):
        super().__init__(need_top_grad=False)

    def list_arguments(self):
        return ["data"]

    def list_outputs(self):
        return ["output"]

    def infer_shape(self, in_shape):
        return in_shape, [in_shape[0]], []

    def create_operator(self, ctx, shapes, dtypes):
        return Gated()


kv.init(10, mx.nd.zeros((n, n)))
kv.init(11, mx.nd.zeros((n, n)))
kv.init(12, mx.nd.zeros((n, n)))
kv._barrier()

# 1. The push returns while its producer waits for it.
value = mx.nd.Custom(mx.nd.ones((n, n)) * (rank + 1), op_type="gated")
kv.push(10, value)
gate.set()
out = mx.nd.zeros((n, n))
kv.pull(10, out=out)
got = out.asnumpy()
check("push returns before its producer and sends its value",
      gate_opened == [True] and np.all(got == 3.0),
      "the producer %s; pulled %s, expected 3" % (
          "ran after the push returned" if gate_opened == [True] else "gave up waiting: the push waited for it",
          got[0, :3]))

# 2. Several values behind a chain of producers; a host write to one right after the push.
a = mx.nd.ones((n, n)) / n
b = a
for _ in range(40):
    b = mx.nd.dot(b, a)          # every product is again ones/n
g = b * (n * (rank + 1))         # (rank + 1) everywhere
kv.push(11, [g, g * 2])
g[:] = -7                        # must not reach the pending push
kv.pull(11, out=out)
got = out.asnumpy()
check("several values summed after their producers; a later host write does not reach the push",
      np.all(got == 9.0), "pulled %s, expected 9 (3 * 1 + 3 * 2)" % got[0, :3])

# 3. A host reader right after the pull. The store's own copy of key 12 holds this worker's
# push until the pull replaces it with the servers' sum.
kv.push(12, mx.nd.ones((n, n)) * (rank + 1) * 10)
out3 = mx.nd.zeros((n, n))
kv.pull(12, out=out3)
total = (out3 * 1).sum().asscalar()  # host ops reading the pulled array, queued at once
check("a host reader of a pulled array waits for the pull",
      total == 30.0 * n * n, "read a sum of %g, expected %g" % (total, 30.0 * n * n))

sys.exit(failures)
