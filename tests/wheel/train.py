"""A small MXNet 1.9 Gluon training script, written for MXNet alone: two CPU contexts, a
`device` store, workers update (update_on_kvstore=False). scripts/test-wheel.sh runs it
through `python -m kvstore` and plainly. It prints its losses, and then whose store it
trained with: a push of a wrong shape to the trainer's own store is refused with
libkvstore's message or with MXNet's (a failed check in its merge buffer's copy)."""
import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

mx.random.seed(1)
np.random.seed(1)
contexts = [mx.cpu(0), mx.cpu(1)]
x = np.random.uniform(-1, 1, (256, 8)).astype("float32")
y = (x @ np.arange(1, 9, dtype="float32") / 8).reshape(-1, 1)
data = gluon.data.DataLoader(gluon.data.ArrayDataset(x, y), batch_size=32, shuffle=False)

net = gluon.nn.Sequential()
net.add(gluon.nn.Dense(16, activation="relu"), gluon.nn.Dense(1))
net.initialize(mx.init.Xavier(), ctx=contexts)
trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1},
                        kvstore="device", update_on_kvstore=False)
loss_fn = gluon.loss.L2Loss()

losses = []
for epoch in range(5):
    total = 0.0
    for xb, yb in data:
        xs = gluon.utils.split_and_load(xb, contexts)
        ys = gluon.utils.split_and_load(yb, contexts)
        with autograd.record():
            batch_losses = [loss_fn(net(a), b) for a, b in zip(xs, ys)]
        for l in batch_losses:
            l.backward()
        trainer.step(xb.shape[0])
        total += sum(l.sum().asscalar() for l in batch_losses)
    losses.append(total / len(x))
print("losses:", " ".join("%.5f" % l for l in losses))

kv = trainer._kvstore
print("store type:", kv.type)
try:
    kv.push(0, mx.nd.ones((99,)))
    replaced = mx.nd.zeros((99,))
    kv.pull(0, out=replaced)
    print("wrong-shape push: accepted, the stored value became shape", replaced.shape)
except mx.base.MXNetError as e:
    # libkvstore: "MXKVStorePush: shape mismatch for key 0: the stored value has shape ...";
    # MXNet 1.9's device store: "Check failed: from.shape() == to.shape(): operands shape ...".
    reason = [line for line in str(e).splitlines() if "mismatch" in line]
    print("wrong-shape push: refused:", reason[0].strip() if reason else str(e).splitlines()[0])
