"""row_sparse keys of a hosted distributed store: every bad call is refused with its reason and
changes nothing (outputs keep their values, the servers' rounds are not disturbed), and the
calls MXNet allows give MXNet's results. Run by every worker of a 2-worker `dist_sync` job in
hosted mode (tests/hosted/run.sh); the server only serves (Python's kvstore_server, on import).
Prints one line per check; exits non-zero on the first failure.

With --valid-only the refused calls are left out: pure MXNet (ps-lite) runs that, so the
expected results of the calls MXNet allows are MXNet's own."""
import sys

import mxnet as mx
import numpy as np

kv = mx.kv.create("dist_sync")
rank, workers = kv.rank, kv.num_workers
assert workers == 2, workers
shape = (4, 3)
valid_only = "--valid-only" in sys.argv[1:]


def refused(what, call, expect):
    if valid_only:
        return
    try:
        call()
    except mx.MXNetError as e:
        text = str(e)
        assert expect in text, f"{what}: expected {expect!r} in the error, got: {text}"
        print(f"refused: {what}")
        return
    raise AssertionError(f"{what}: was accepted")


def same(what, array, expected):
    got = array.asnumpy()
    assert got.shape == expected.shape and np.array_equal(got, expected), f"{what}: got\n{got}\nexpected\n{expected}"
    print(f"ok: {what}")


def rows(pairs, dtype="float32"):
    """A row_sparse (4, 3) array with `pairs` = {row: value}."""
    dense = np.zeros(shape, dtype=dtype)
    for r, v in pairs.items():
        dense[r] = v
    return mx.nd.array(dense, dtype=dtype).tostype("row_sparse")


kv.init("w", mx.nd.ones(shape).tostype("row_sparse"))
kv.init("d", mx.nd.ones(shape))
kv.init(["a", "b"], [mx.nd.ones(shape) * 2, rows({0: 3, 1: 3, 2: 3, 3: 3})])
pulled = mx.nd.zeros(shape)
kv.pull("a", out=pulled)
same("one init of a dense and a row_sparse key: the dense one", pulled, np.full(shape, 2, dtype="float32"))
pulled = mx.nd.sparse.zeros("row_sparse", shape)
kv.row_sparse_pull("b", out=pulled, row_ids=mx.nd.arange(0, 4))
same("one init of a dense and a row_sparse key: the row_sparse one", pulled, np.full(shape, 3, dtype="float32"))
refused("an init of a new dense key and an inited row_sparse key", lambda: kv.init(["c", "w"], [mx.nd.ones(shape), rows({0: 1})]), "duplicate init of key")
refused("an init naming a new row_sparse key twice", lambda: kv.init(["e", "e"], [rows({0: 1}), rows({0: 1})]), "duplicate init of key")
refused("a pull of a key a refused init named", lambda: kv.pull("c", out=mx.nd.zeros(shape)), "doesn't exist. Did you init?")
refused("a PullRowSparse of a key a refused init named", lambda: kv.row_sparse_pull("e", out=rows({}), row_ids=mx.nd.array([0])), "doesn't exist. Did you init?")
refused("an init of an inited row_sparse key", lambda: kv.init("w", rows({0: 1})), "duplicate init of key")
refused("a dense init of an inited row_sparse key", lambda: kv.init("w", mx.nd.ones(shape)), "duplicate init of key")

# Pushes that are refused must not count toward the servers' round.
refused("a dense push to a row_sparse key", lambda: kv.push("w", mx.nd.ones(shape)), "to a row_sparse key")
refused("a row_sparse push to a dense key", lambda: kv.push("d", rows({0: 1})), "to a default key")
refused("a row_sparse push of another shape", lambda: kv.push("w", mx.nd.ones((5, 3)).tostype("row_sparse")), "shape mismatch")
refused("a row_sparse push of another dtype", lambda: kv.push("w", rows({0: 1}, "float64")), "dtype mismatch")
refused("a push-pull of a row_sparse key", lambda: kv.pushpull("w", rows({0: 1}), out=rows({})), "List of push and pull keys are different")
refused("a push-pull into a row_sparse output", lambda: kv.pushpull("d", mx.nd.ones(shape), out=rows({})), "List of push and pull keys are different")
refused("a push to a row_sparse key never inited", lambda: kv.push("nope", rows({0: 1})), "doesn't exist. Did you init?")

out = mx.nd.full(shape, 7)
refused("a dense pull of a row_sparse key", lambda: kv.pull("w", out=out), "read with PullRowSparse")
same("the refused pull left its output alone", out, np.full(shape, 7, dtype="float32"))
rsp_out = rows({1: 5})
kv.pull("w", out=rsp_out)
same("a pull skips row_sparse outputs (ignore_sparse)", rsp_out, rows({1: 5}).asnumpy())
refused("a pull with ignore_sparse=False", lambda: kv.pull("w", out=rsp_out, ignore_sparse=False), "ignore_sparse=False")
refused("PullRowSparse of a dense key", lambda: kv.row_sparse_pull("d", out=rows({}), row_ids=mx.nd.array([0])), "PullRowSparse expects row_sparse src NDArray")
refused("PullRowSparse into a dense output", lambda: kv.row_sparse_pull("w", out=mx.nd.zeros(shape), row_ids=mx.nd.array([0])), "Expected row_sparse storage type")
refused("PullRowSparse of a row id out of range", lambda: kv.row_sparse_pull("w", out=rsp_out, row_ids=mx.nd.array([1, 9])), "out of range")
same("the refused PullRowSparse left its output alone", rsp_out, rows({1: 5}).asnumpy())

# Row ids of any shape and dtype, repeated; the output's dtype differs from the key's
# (libkvstore casts; MXNet's dist store reads the key's bytes as the output's dtype, so pure
# MXNet pulls into the key's dtype).
out_dtype = "float32" if valid_only else "float64"
wide = mx.nd.sparse.zeros("row_sparse", shape, dtype=out_dtype)
kv.row_sparse_pull("w", out=wide, row_ids=mx.nd.array([[3, 1], [1, 3]], dtype="float16"))
same("PullRowSparse: the named rows, cast to the output's dtype", wide, rows({1: 1, 3: 1}, out_dtype).asnumpy())
assert wide.dtype == np.dtype(out_dtype) and list(wide.indices.asnumpy()) == [1, 3], (wide.dtype, wide.indices)
print("ok: PullRowSparse output holds exactly rows [1, 3]")
empty = rows({0: 4})
kv.row_sparse_pull("w", out=empty, row_ids=mx.nd.array([]))
same("PullRowSparse of no rows empties the output", empty, np.zeros(shape, dtype="float32"))

# The servers' optimizer (Python's kvstore_server runs the pickled optimizer, here on host
# row_sparse arrays): SGD with lr 1 and rescale_grad -1 adds each round's sum to the rows it
# names. The refused pushes above must not have counted toward a round.
kv.set_optimizer(mx.optimizer.SGD(learning_rate=1.0, rescale_grad=-1.0))
kv.push("w", rows({rank: rank + 1}))
got = mx.nd.sparse.zeros("row_sparse", shape)
kv.row_sparse_pull("w", out=got, row_ids=mx.nd.arange(0, 4))
same("one round of row_sparse pushes after the refused ones", got, np.array([[2] * 3, [3] * 3, [1] * 3, [1] * 3], dtype="float32"))

# Several values of one key in one push are summed over the union of their rows.
kv.push(["w", "w"], [rows({2: 1}), rows({2: 2, 3: 1})])
kv.row_sparse_pull("w", out=got, row_ids=mx.nd.arange(0, 4))
same("two values of one key in one push", got, np.array([[2] * 3, [3] * 3, [7] * 3, [3] * 3], dtype="float32"))

# One push of a dense and a row_sparse key; then each half refused in turn changes nothing.
kv.push(["d", "w"], [mx.nd.ones(shape) * (rank + 1), rows({3: 10})])
dense = mx.nd.zeros(shape)
kv.pull("d", out=dense)
kv.row_sparse_pull("w", out=got, row_ids=mx.nd.array([3, 0]))
after = rows({0: 2, 3: 23}).asnumpy()
same("a push of a dense and a row_sparse key: the dense one", dense, np.full(shape, 4, dtype="float32"))
same("a push of a dense and a row_sparse key: the row_sparse one", got, after)
refused("a push whose row_sparse half is bad", lambda: kv.push(["d", "w"], [mx.nd.ones(shape), mx.nd.ones((5, 3)).tostype("row_sparse")]), "shape mismatch")
refused("a push whose dense half is bad", lambda: kv.push(["d", "w"], [mx.nd.ones((5, 3)), rows({0: 1})]), "shape mismatch")
kv.pull("d", out=dense)
kv.row_sparse_pull("w", out=got, row_ids=mx.nd.array([3, 0]))
same("the refused mixed pushes left the dense key alone", dense, np.full(shape, 4, dtype="float32"))
same("the refused mixed pushes left the row_sparse key alone", got, after)
print(f"worker {rank}: all row_sparse checks passed")
sys.stdout.flush()
