"""An unchanged MXNet 1.9 training script: run on pure MXNet and in hosted mode
(MXNET_LIBRARY_PATH=libkvstore.so, KVSTORE_HOST_LIBRARY=libmxnet.so), its stdout must be
byte-identical. Prints every step's loss as float.hex, then a SHA-256 of all parameters.

usage: train.py MODEL KVSTORE UPDATE_ON_KVSTORE NUM_CPUS STEPS [COMPRESSION]
MODEL: mlp | conv (oneDNN layouts) | hybrid | module (Module API, string keys) |
       loader (the mlp fed by a gluon DataLoader with 2 worker processes: MXNet forks)
KVSTORE: local | device | a dist store (dist_sync, ...; start it with a launcher): each worker
then trains on its own stripe of the data and first prints its rank.
COMPRESSION: TYPE:THRESHOLD (e.g. 2bit:0.05), passed as compression_params (Gluon's Trainer,
       the Module constructor). A dist store's worker then pushes and pulls itself (MXNet's
       dist PushPull, which the Trainer and Module call, refuses compression).
"""
import hashlib
import multiprocessing
import sys

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

model, kvstore, update_on_kv, ncpu, steps = sys.argv[1], sys.argv[2], sys.argv[3] == "1", int(sys.argv[4]), int(sys.argv[5])
compression = None
if len(sys.argv) > 6:
    kind, threshold = sys.argv[6].split(":")
    compression = {"type": kind, "threshold": float(threshold)}
ctxs = [mx.cpu(i) for i in range(ncpu)]
rank, workers = 0, 1
if kvstore.startswith("dist"):
    kvstore = mx.kv.create(kvstore)
    rank, workers = kvstore.rank, kvstore.num_workers
    print("rank", rank)
mx.random.seed(7)
rng = np.random.RandomState(7)
batch = 8 * ncpu
if model == "conv":
    X = rng.rand(batch * steps * workers, 1, 8, 8).astype("float32")
else:
    X = rng.rand(batch * steps * workers, 20).astype("float32")
Y = rng.randint(0, 4, size=batch * steps * workers).astype("float32")
# Worker `rank` trains on the rank-th batch of every group of `workers` batches.
X = X.reshape((steps, workers, batch) + X.shape[1:])[:, rank].reshape((-1,) + X.shape[1:])
Y = Y.reshape(steps, workers, batch)[:, rank].reshape(-1)


def digest(arrays):
    h = hashlib.sha256()
    for a in arrays:
        h.update(a.asnumpy().tobytes())
    return h.hexdigest()


if model == "module":
    data = mx.sym.Variable("data")
    net = mx.sym.FullyConnected(data, num_hidden=16, name="fc1")
    net = mx.sym.Activation(net, act_type="relu")
    net = mx.sym.FullyConnected(net, num_hidden=4, name="fc2")
    net = mx.sym.SoftmaxOutput(net, name="softmax")
    it = mx.io.NDArrayIter(X, Y, batch_size=batch)
    mod = mx.mod.Module(net, context=ctxs, compression_params=compression)
    mod.bind(data_shapes=it.provide_data, label_shapes=it.provide_label)
    mod.init_params(mx.init.Xavier(rnd_type="gaussian"))
    mod.init_optimizer(kvstore=kvstore, optimizer="sgd",
                       optimizer_params={"learning_rate": 0.1, "momentum": 0.9})
    if not update_on_kv:
        pass  # Module decides update_on_kvstore itself from the store type
    metric = mx.metric.CrossEntropy()
    for b in it:
        mod.forward_backward(b)
        mod.update()
        metric.reset()
        mod.update_metric(metric, b.label)
        print(float(metric.get()[1]).hex())
    args, auxs = mod.get_params()
    print(digest([args[k] for k in sorted(args)] + [auxs[k] for k in sorted(auxs)]))
    sys.exit(0)

if model == "conv":
    net = gluon.nn.Sequential()
    net.add(gluon.nn.Conv2D(4, 3, activation="relu"), gluon.nn.MaxPool2D(2), gluon.nn.Dense(4))
else:
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(16, activation="relu"), gluon.nn.Dense(4))
net.initialize(mx.init.Xavier(rnd_type="gaussian"), ctx=ctxs)
if model == "hybrid":
    net.hybridize()
# MXNet's dist PushPull refuses compression, and the Trainer pushes with it: a compressed dist
# worker drives the store itself (push the gradients, pull the weights updated on the servers
# or the summed gradients), with a store-less Trainer for the update on the worker.
manual = compression is not None and isinstance(kvstore, mx.kv.KVStore)
trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1, "momentum": 0.9},
                        kvstore=None if manual else kvstore, update_on_kvstore=None if manual else update_on_kv,
                        compression_params=None if manual else compression)
params = list(net.collect_params().values())


def manual_step(step):
    if step == 0:  # the shapes are known after the first backward
        kvstore.set_gradient_compression(compression)
        if update_on_kv:
            kvstore.set_optimizer(mx.optimizer.SGD(learning_rate=0.1, momentum=0.9, rescale_grad=1.0 / batch))
        for i, p in enumerate(params):
            kvstore.init(i, p.data(ctxs[0]))
            kvstore.pull(i, p.list_data(), priority=-i)
    for i, p in enumerate(params):
        kvstore.push(i, p.list_grad(), priority=-i)
        kvstore.pull(i, p.list_data() if update_on_kv else p.list_grad(), priority=-i)
    if not update_on_kv:
        trainer.update(batch)


loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()


def loaded_batches():
    """Step 0 from arrays; then, with the store created and holding values, a DataLoader whose
    2 worker processes MXNet forks (it stops and restarts its engine around the fork)."""
    yield mx.nd.array(X[:batch]), mx.nd.array(Y[:batch])
    dataset = gluon.data.ArrayDataset(mx.nd.array(X[batch:]), mx.nd.array(Y[batch:]))
    loader = gluon.data.DataLoader(dataset, batch_size=batch, shuffle=False, num_workers=2)
    # The batches must really come from forked workers, or the row proves nothing about fork.
    assert loader._worker_pool is not None and multiprocessing.get_start_method() == "fork"
    yield from loader


if model == "loader":
    batches = loaded_batches()
else:
    batches = ((mx.nd.array(X[s * batch:(s + 1) * batch]), mx.nd.array(Y[s * batch:(s + 1) * batch]))
               for s in range(steps))
for step in range(steps):
    x, y = next(batches)
    xs = gluon.utils.split_and_load(x, ctxs)
    ys = gluon.utils.split_and_load(y, ctxs)
    with autograd.record():
        losses = [loss_fn(net(x), y) for x, y in zip(xs, ys)]
    for l in losses:
        l.backward()
    if manual:
        manual_step(step)
    else:
        trainer.step(batch)
    print(float(sum(l.sum().asscalar() for l in losses)).hex())
print(digest([p.data(ctxs[0]) for _, p in sorted(net.collect_params().items())]))
