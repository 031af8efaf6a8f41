"""Uneven data on dist_sync: an unchanged Gluon training loop whose workers have 10, 7 and 3
batches (MXNet issue 7888: on MXNet 1.9 the others' next sync push waits forever for the worker
that ran out). On libkvstore a worker that is done joins when it leaves (its store freed at
exit): the other workers' rounds complete without it, its share zero.

A linear model (Dense(1), no bias) under L2 loss, SGD on the servers (update_on_kvstore): in
step k the servers apply w <- w - lr / batch * sum over the workers that still have a batch k
of X_k^T (X_k w - y_k). Every worker holds every worker's data (same seed), simulates that rule
in float64 and checks its final weight against the simulated weight after its own last step
(worker 0's is the servers' final state); it also shows that the weight differs from a rule
that averages over the active workers, so the check discriminates. Prints
`rank R steps N uneven ok` on success.

usage (3 workers): kvstore-launch -n 3 -s 2 python dist_uneven.py
"""
import sys

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

BATCHES = [10, 7, 3]
BATCH, DIM, LR = 4, 6, 0.05

kv = mx.kv.create("dist_sync")
rank, workers = kv.rank, kv.num_workers
assert workers == len(BATCHES), "run with %d workers" % len(BATCHES)
rng = np.random.RandomState(11)
w_true = rng.randn(DIM)
data = []
for n in BATCHES:
    x = rng.rand(n * BATCH, DIM).astype(np.float32)
    y = (x @ w_true + 0.01 * rng.randn(n * BATCH)).astype(np.float32).reshape(-1, 1)
    data.append((x, y))

net = gluon.nn.Dense(1, use_bias=False, in_units=DIM)
net.initialize(mx.init.Constant(0.1))
trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": LR}, kvstore=kv, update_on_kvstore=True)
loss_fn = gluon.loss.L2Loss()
x_mine, y_mine = data[rank]
for step in range(BATCHES[rank]):
    x = mx.nd.array(x_mine[step * BATCH:(step + 1) * BATCH])
    y = mx.nd.array(y_mine[step * BATCH:(step + 1) * BATCH])
    with autograd.record():
        loss = loss_fn(net(x), y)
    loss.backward()
    trainer.step(BATCH)
got = net.weight.data().asnumpy().ravel().astype(np.float64)


def simulate(steps, average):
    """The weight after `steps` steps: each step sums (or averages) the gradients of the
    workers that have that batch."""
    w = np.full(DIM, 0.1)
    for k in range(steps):
        grads = []
        for (x, y), n in zip(data, BATCHES):
            if n > k:
                xk, yk = x[k * BATCH:(k + 1) * BATCH].astype(np.float64), y[k * BATCH:(k + 1) * BATCH, 0].astype(np.float64)
                grads.append(xk.T @ (xk @ w - yk))
        g = np.sum(grads, axis=0) / (len(grads) if average else 1)
        w = w - LR / BATCH * g
    return w


want = simulate(BATCHES[rank], average=False)
other = simulate(BATCHES[rank], average=True)
err = np.max(np.abs(got - want) / np.maximum(np.abs(want), 1e-3))
err_other = np.max(np.abs(got - other) / np.maximum(np.abs(other), 1e-3))
print("rank %d weight %s" % (rank, " ".join("%.6f" % v for v in got)))
print("rank %d join rule %s" % (rank, " ".join("%.6f" % v for v in want)))
if err > 1e-4:
    print("rank %d steps %d: the weight is not the join rule's (max relative error %.3g)" % (rank, BATCHES[rank], err))
    sys.exit(1)
if err_other < 1e-3:
    print("rank %d: the averaging rule gives the same weight: the check proves nothing" % rank)
    sys.exit(1)
print("rank %d steps %d uneven ok (max relative error %.2g; averaging rule off by %.2g)" % (rank, BATCHES[rank], err, err_other))
