"""row_sparse pushes to a dist_async store with the optimizer on the server: each worker pushes
five gradients naming different rows, then all pull every row after a barrier. SGD with lr 1
and rescale_grad -1 adds each gradient, so the result does not depend on arrival order and pure
MXNet and hosted mode must print the same (tests/hosted/run.sh compares them). Each worker
first pulls its own pushes back and waits: a dist_async barrier does not wait for pushes in
flight (ps-lite's sometimes overtakes the last ones), and the pull is ordered after them."""
import mxnet as mx
import numpy as np

kv = mx.kv.create("dist_async")
rank = kv.rank
shape = (6, 2)
kv.init("w", mx.nd.ones(shape).tostype("row_sparse"))
kv.set_optimizer(mx.optimizer.SGD(learning_rate=1.0, rescale_grad=-1.0))
for i in range(5):
    grad = np.zeros(shape, dtype="float32")
    grad[rank] = 1
    grad[2 + rank * 2] = i
    kv.push("w", mx.nd.array(grad).tostype("row_sparse"))
mine = mx.nd.sparse.zeros("row_sparse", shape)
kv.row_sparse_pull("w", out=mine, row_ids=mx.nd.arange(0, 6))
mx.nd.waitall()
kv._barrier()
out = mx.nd.sparse.zeros("row_sparse", shape)
kv.row_sparse_pull("w", out=out, row_ids=mx.nd.arange(0, 6))
print("rank", rank)
print(out.asnumpy().tolist())
kv._barrier()
