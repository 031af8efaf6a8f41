"""One process of benches/hosted-step.sh: trains a small ResNet-style Gluon model (three
residual blocks of 3x3 convolutions with batch norm) on NUM_CPUS CPU contexts with the
KVSTORE store for WARMUP + STEPS steps, and prints the seconds of each measured step (one
per line). WHAT = step: a whole step (forward and backward on every context, Trainer.step,
then waiting for all of MXNet's work, so the store's sums, updates and pulls are inside the
figure). WHAT = store: only Trainer.step and the wait for it, after waiting for backward
(the store's part, without its overlap with the backward pass). WHAT = parts: the store's
part split, one line per step: its seconds, the seconds inside the store's pushpull calls,
the seconds of the optimizer the store calls back inside them (the same Python and MXNet
operators on both sides), the number of calls, and the seconds of the final wait.

usage: hosted_step.py KVSTORE NUM_CPUS WARMUP STEPS WHAT   (WHAT: step, store or parts)
Run unchanged on pure MXNet or in hosted mode; the driver interleaves the two.
"""
import sys
import time

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

kvstore, ncpu, warmup, steps, what = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
ctxs = [mx.cpu(i) for i in range(ncpu)]
per_context = 8


class Residual(gluon.nn.HybridBlock):
    def __init__(self, channels, stride, **kwargs):
        super().__init__(**kwargs)
        self.body = gluon.nn.HybridSequential()
        self.body.add(gluon.nn.Conv2D(channels, 3, stride, 1, use_bias=False), gluon.nn.BatchNorm(),
                      gluon.nn.Activation("relu"), gluon.nn.Conv2D(channels, 3, 1, 1, use_bias=False),
                      gluon.nn.BatchNorm())
        self.skip = gluon.nn.Conv2D(channels, 1, stride, use_bias=False) if stride != 1 else None

    def hybrid_forward(self, F, x):
        skip = self.skip(x) if self.skip is not None else x
        return F.relu(self.body(x) + skip)


net = gluon.nn.HybridSequential()
net.add(gluon.nn.Conv2D(16, 3, 1, 1, use_bias=False), gluon.nn.BatchNorm(), gluon.nn.Activation("relu"),
        Residual(16, 1), Residual(32, 2), Residual(64, 2), gluon.nn.GlobalAvgPool2D(), gluon.nn.Dense(10))
mx.random.seed(1)
net.initialize(mx.init.Xavier(), ctx=ctxs)
net.hybridize()
trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.05, "momentum": 0.9}, kvstore=kvstore)
loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
rng = np.random.RandomState(1)
batch = per_context * ncpu
x_all = mx.nd.array(rng.rand(batch, 3, 32, 32).astype("float32"))
y_all = mx.nd.array(rng.randint(0, 10, size=batch).astype("float32"))
xs = gluon.utils.split_and_load(x_all, ctxs)
ys = gluon.utils.split_and_load(y_all, ctxs)
mx.nd.waitall()
spent = {"pushpull": 0.0, "updater": 0.0, "calls": 0}


def timed(f, what, counted=False):
    def call(*args, **kwargs):
        start = time.perf_counter()
        try:
            return f(*args, **kwargs)
        finally:
            spent[what] += time.perf_counter() - start
            spent["calls"] += counted
    return call


if what == "parts":
    mx.kvstore.KVStore.pushpull = timed(mx.kvstore.KVStore.pushpull, "pushpull", True)
    mx.optimizer.Updater.__call__ = timed(mx.optimizer.Updater.__call__, "updater")
for step in range(warmup + steps):
    start = time.perf_counter()
    with autograd.record():
        losses = [loss_fn(net(x), y) for x, y in zip(xs, ys)]
    for l in losses:
        l.backward()
    if what in ("store", "parts"):
        mx.nd.waitall()
        start = time.perf_counter()
        spent.update(pushpull=0.0, updater=0.0, calls=0)
    trainer.step(batch)
    stepped = time.perf_counter()
    mx.nd.waitall()
    end = time.perf_counter()
    if step >= warmup and what == "parts":
        print(f"{end - start:.6f} {spent['pushpull']:.6f} {spent['updater']:.6f} {spent['calls']} {end - stepped:.6f}", flush=True)
    elif step >= warmup:
        print(f"{end - start:.6f}", flush=True)
