"""The seed walkthrough and the KVStore API of the unchanged PyPI `mxnet==1.9.1` package.

`scripts/python-frontend.sh` runs this file twice: with `MXNET_LIBRARY_PATH` pointing at
libkvstore.so, and without it, against the wheel's own libmxnet.so, so a test that asserts something
MXNet does not do fails on the reference run. `test_library_under_test` records which
library was loaded, so a run can never silently test the wrong one.
"""
import os

import mxnet as mx
import numpy as np
import pytest
from mxnet.base import MXNetError, _LIB

SHAPE = (4, 4)
CPUS = [mx.cpu(i) for i in range(4)]
# Set by scripts/python-frontend.sh for the run against the wheel's own libmxnet.so.
IS_REFERENCE = not os.environ.get("MXNET_LIBRARY_PATH")
# The hosted run: libkvstore.so's store, the real libmxnet.so for everything else.
HOSTED = not IS_REFERENCE and bool(os.environ.get("KVSTORE_HOST_LIBRARY"))


def full(value, shape=SHAPE, ctx=mx.cpu(0), dtype="float32"):
    return mx.nd.full(shape, value, ctx=ctx, dtype=dtype)


def assert_all(array, value):
    got = array.asnumpy()
    assert np.array_equal(got, np.full(got.shape, value, dtype=got.dtype)), got


def test_library_under_test():
    if IS_REFERENCE:
        assert os.path.basename(_LIB._name) == "libmxnet.so"
    else:
        assert os.path.realpath(_LIB._name) == os.path.realpath(os.environ["MXNET_LIBRARY_PATH"])
    if HOSTED:  # an operator only MXNet has computes: the host is really there
        a = mx.nd.array([[1, 2], [3, 4]])
        assert mx.nd.dot(a, a).asnumpy().tolist() == [[7, 10], [15, 22]]


def test_type_rank_and_num_workers():
    for name in ["local", "device", "local_allreduce_cpu"]:
        kv = mx.kv.create(name)
        assert kv.type == name
        assert kv.rank == 0
        assert kv.num_workers == 1


def test_walkthrough_init_push_pull():
    """The seed walkthrough: init, push of one and of 4 values, multi-device pulls."""
    kv = mx.kv.create("local")
    kv.init(3, mx.nd.ones(SHAPE) * 2)
    out = mx.nd.zeros(SHAPE)
    kv.pull(3, out=out)
    assert_all(out, 2)

    kv.push(3, mx.nd.ones(SHAPE) * 8)
    kv.pull(3, out=out)
    assert_all(out, 8)

    # a list of values for one key is summed, whatever context each lives on
    kv.push(3, [mx.nd.ones(SHAPE, ctx) for ctx in CPUS])
    outs = [mx.nd.zeros(SHAPE, ctx) for ctx in CPUS]
    kv.pull(3, out=outs)
    for o, ctx in zip(outs, CPUS):
        assert o.context == ctx
        assert_all(o, 4)


def test_updater_sees_merged_value_and_aliases_the_stored_one():
    kv = mx.kv.create("local")
    kv.init(3, mx.nd.ones(SHAPE))
    calls = []

    def update(key, recv, stored):
        calls.append((key, recv.asnumpy().copy()))
        stored += recv * 2  # writes through to the store's value

    kv._set_updater(update)
    kv.push(3, [mx.nd.ones(SHAPE, ctx) for ctx in CPUS])
    out = mx.nd.zeros(SHAPE)
    kv.pull(3, out=out)
    assert_all(out, 1 + 2 * 4)
    assert len(calls) == 1 and calls[0][0] == 3
    assert np.array_equal(calls[0][1], np.full(SHAPE, 4, np.float32))


def test_lists_of_keys():
    kv = mx.kv.create("local")
    keys = [5, 7, 11]
    kv.init(keys, [full(k) for k in keys])
    kv.push(keys, [[full(k, ctx=c) for c in CPUS] for k in keys])
    outs = [[mx.nd.zeros(SHAPE, c) for c in CPUS] for _ in keys]
    kv.pull(keys, out=outs)
    for k, row in zip(keys, outs):
        for o in row:
            assert_all(o, 4 * k)


def test_string_keys_and_mixed_key_types_are_refused():
    kv = mx.kv.create("local")
    kv.init("w", mx.nd.zeros(SHAPE))
    kv.init(["x", "y"], [full(1), full(2)])
    kv.push(["w", "x"], [full(3), [full(1), full(1)]])
    outs = [mx.nd.zeros(SHAPE) for _ in range(3)]
    kv.pull(["w", "x", "y"], out=outs)
    for o, want in zip(outs, [3, 2, 2]):
        assert_all(o, want)
    with pytest.raises(MXNetError):
        kv.init(9, mx.nd.zeros(SHAPE))


def test_pull_of_uninitialised_key_raises():
    kv = mx.kv.create("local")
    kv.init(1, mx.nd.zeros(SHAPE))
    with pytest.raises(MXNetError):
        kv.pull(2, out=mx.nd.zeros(SHAPE))
        mx.nd.waitall()


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "int32", "int64", "uint8"])
def test_dtypes_survive_push_and_pull(dtype):
    kv = mx.kv.create("device")
    kv.init("k", full(1, dtype=dtype))
    kv.push("k", [full(i + 1, ctx=c, dtype=dtype) for i, c in enumerate(CPUS)])
    out = mx.nd.zeros(SHAPE, dtype=dtype)
    kv.pull("k", out=out)
    assert out.dtype == np.dtype(dtype)
    assert_all(out, 10)


def test_pushpull_in_place_and_into_outputs():
    kv = mx.kv.create("local")
    kv.init(0, mx.nd.zeros(SHAPE))
    vals = [full(i + 1, ctx=c) for i, c in enumerate(CPUS)]
    kv.pushpull(0, vals)  # out=None: the values themselves receive the sum
    for v in vals:
        assert_all(v, 10)
    outs = [mx.nd.zeros(SHAPE, c) for c in CPUS]
    kv.pushpull(0, [full(1, ctx=c) for c in CPUS], out=outs)
    for o in outs:
        assert_all(o, 4)


def test_broadcast_initialises_and_pulls():
    kv = mx.kv.create("local")
    outs = [mx.nd.zeros(SHAPE, c) for c in CPUS]
    kv.broadcast("b", full(6), out=outs)
    for o in outs:
        assert_all(o, 6)
    again = mx.nd.zeros(SHAPE)
    kv.pull("b", out=again)
    assert_all(again, 6)


def test_row_sparse_push_and_row_sparse_pull():
    kv = mx.kv.create("local")
    dense = np.zeros(SHAPE, np.float32)
    kv.init("e", mx.nd.array(dense).tostype("row_sparse"))
    grad = np.zeros(SHAPE, np.float32)
    grad[[0, 2]] = [[1, 2, 3, 4], [5, 6, 7, 8]]
    kv.push("e", [mx.nd.array(grad, ctx=c).tostype("row_sparse") for c in CPUS[:2]])

    for row_ids, dtype in [([2, 0, 2], "int64"), ([1, 2], "float32")]:
        out = mx.nd.zeros(SHAPE, stype="row_sparse")
        ids = mx.nd.array(row_ids, dtype=dtype)
        kv.row_sparse_pull("e", out=out, row_ids=ids)
        assert out.stype == "row_sparse"
        want_rows = sorted(set(row_ids))
        assert out.indices.asnumpy().tolist() == want_rows
        assert np.array_equal(out.data.asnumpy(), 2 * grad[want_rows])
        assert np.array_equal(out.asnumpy()[want_rows], 2 * grad[want_rows])

    with pytest.raises(MXNetError):  # row_sparse_pull wants row_sparse outputs
        kv.row_sparse_pull("e", out=mx.nd.zeros(SHAPE), row_ids=mx.nd.array([0]))
        mx.nd.waitall()


def test_cast_storage_round_trip():
    a = np.zeros(SHAPE, np.float32)
    a[1] = 3
    rsp = mx.nd.array(a).tostype("row_sparse")
    assert rsp.stype == "row_sparse"
    assert rsp.indices.asnumpy().tolist() == [1]
    back = rsp.tostype("default")
    assert back.stype == "default"
    assert np.array_equal(back.asnumpy(), a)


def test_nd_arithmetic_on_pulled_values():
    kv = mx.kv.create("local")
    kv.init(3, full(3))
    kv.push(3, [full(1.5, ctx=c) for c in CPUS])
    a = mx.nd.zeros(SHAPE)
    kv.pull(3, out=a)
    b = full(2)
    checks = [
        (a + b, 8), (a - b, 4), (a * b, 12), (a / b, 3),
        (a + 1, 7), (a - 1, 5), (1 - a, -5), (a * 2, 12), (a / 4, 1.5), (12 / a, 2),
        (mx.nd.elemwise_add(a, b), 8), (mx.nd.elemwise_sub(a, b), 4),
        (mx.nd.elemwise_mul(a, b), 12), (mx.nd.elemwise_div(a, b), 3),
        (mx.nd.broadcast_add(a, full(1, shape=(1, 4))), 7),
        (mx.nd.broadcast_mul(a, full(2, shape=(4, 1))), 12),
    ]
    for got, want in checks:
        assert got.shape == SHAPE
        assert_all(got, want)
    assert a.sum().asscalar() == 6 * 16
    assert mx.nd.sum(a, axis=1).asnumpy().tolist() == [24.0] * 4
    assert a.astype("int32").dtype == np.int32
    assert_all(a.astype("float64"), 6)
    c = a.copy()
    c += b
    assert_all(c, 8)
    assert_all(a, 6)
    on_cpu2 = a.copyto(mx.cpu(2))
    assert on_cpu2.context == mx.cpu(2)
    assert_all(on_cpu2, 6)
    a[:] = 0.5
    assert_all(a, 0.5)
    assert_all(mx.nd.ones((2, 2), dtype="int64") * 3, 3)


def test_bad_input_raises_instead_of_crashing():
    kv = mx.kv.create("local")
    kv.init(1, full(5))
    # MXNet accepts the push and fails at the pull; libkvstore refuses the push itself and
    # keeps the stored value (a deliberate improvement): both raise MXNetError by the pull.
    with pytest.raises(MXNetError):
        kv.push(1, mx.nd.zeros((3, 3)))
        kv.pull(1, out=mx.nd.zeros(SHAPE))
        mx.nd.waitall()
    if not IS_REFERENCE:
        kept = mx.nd.zeros(SHAPE)
        kv.pull(1, out=kept)
        assert_all(kept, 5)
    with pytest.raises(MXNetError):
        mx.nd.broadcast_add(full(1), full(1, shape=(3, 3)))


def _rsp(a, ctx=mx.cpu(0)):
    return mx.nd.array(a, ctx=ctx).tostype("row_sparse")


def _some_rows():
    some = np.zeros(SHAPE, np.float32)
    some[[1, 3]] = [[1, 2, 3, 4], [5, 6, 7, 8]]
    return some


def test_push_storage_types_mixed():
    """MXNet's local store: the first value's storage type picks the sum; without updater a
    sum of another storage type than the stored value's replaces it (a row_sparse key
    pushed dense values becomes dense); an updater sees both storage types as they are."""
    some = _some_rows()
    kv = mx.kv.create("local")

    kv.init("r", _rsp(np.zeros(SHAPE, np.float32)))
    kv.push("r", full(2))                       # dense value, no updater: the key becomes dense
    out = mx.nd.zeros(SHAPE)
    kv.pull("r", out=out)
    assert_all(out, 2)
    with pytest.raises(MXNetError):             # so it is no longer row_sparse
        kv.row_sparse_pull("r", out=mx.nd.zeros(SHAPE, stype="row_sparse"), row_ids=mx.nd.array([0]))
        mx.nd.waitall()

    kv.init("m", full(0))                       # dense first: a dense sum
    kv.push("m", [full(1, ctx=CPUS[0]), _rsp(some, CPUS[1]), full(3, ctx=CPUS[2])])
    kv.pull("m", out=out)
    assert np.array_equal(out.asnumpy(), some + 4)

    kv.init("s", _rsp(np.zeros(SHAPE, np.float32)))
    seen = []
    kv._set_updater(lambda key, recv, local: seen.append((key, recv.stype, local.stype)))
    kv.push("s", full(1))                       # the updater gets the dense sum, the row_sparse value
    kv.push("m", _rsp(some))
    mx.nd.waitall()
    assert seen == [(b"s", "default", "row_sparse"), (b"m", "row_sparse", "default")], seen


def test_push_row_sparse_first_then_dense():
    some = _some_rows()
    kv = mx.kv.create("local")
    kv.init("s", _rsp(np.zeros(SHAPE, np.float32)))  # row_sparse first: a row_sparse sum
    dense_rows = np.zeros(SHAPE, np.float32)
    dense_rows[2] = 9
    kv.push("s", [_rsp(some, CPUS[0]), mx.nd.array(dense_rows, ctx=CPUS[1])])
    got = mx.nd.zeros(SHAPE, stype="row_sparse")
    kv.row_sparse_pull("s", out=got, row_ids=mx.nd.array([0, 1, 2, 3]))
    assert got.indices.asnumpy().tolist() == [0, 1, 2, 3]
    assert np.array_equal(got.asnumpy(), some + dense_rows)


def two_bit(residual, grad, threshold):
    """MXNet 1.9's 2bit quantisation of one value (float32): what is sent, and the new residual."""
    residual = residual + grad
    sent = np.where(residual >= threshold, threshold, np.where(residual <= -threshold, -threshold, 0)).astype("float32")
    return sent, (residual - sent).astype("float32")


def test_device_store_compresses_each_source_with_its_own_residual():
    """2bit on a `device` store: each context's gradient is quantised against its position's
    residual, so what is not sent at one step is sent later; Init is not compressed."""
    t = np.float32(0.5)
    kv = mx.kv.create("device")
    kv.set_gradient_compression({"type": "2bit", "threshold": float(t)})
    kv.init(5, full(0.3))
    out = mx.nd.zeros(SHAPE)
    kv.pull(5, out=out)
    assert_all(out, np.float32(0.3))  # not quantised
    rng = np.random.RandomState(3)
    residuals = [np.zeros(SHAPE, "float32") for _ in range(3)]
    for step in range(6):
        grads = [rng.uniform(-0.4, 0.4, SHAPE).astype("float32") for _ in range(3)]
        kv.push(5, [mx.nd.array(g, ctx=CPUS[i]) for i, g in enumerate(grads)])
        want = np.zeros(SHAPE, "float32")
        for i, g in enumerate(grads):
            sent, residuals[i] = two_bit(residuals[i], g, t)
            want = want + sent
        kv.pull(5, out=out)
        assert np.array_equal(out.asnumpy(), want), (step, out.asnumpy(), want)
    assert np.abs(want).max() > 0  # codes fired: the check above is not all zeros


def test_gradient_compression_parameters_and_types():
    kv = mx.kv.create("device")
    with pytest.raises(MXNetError, match="Unknown type for gradient compression 3bit"):
        kv.set_gradient_compression({"type": "3bit"})
    with pytest.raises(MXNetError, match="threshold must be greater than 0"):
        kv.set_gradient_compression({"type": "2bit", "threshold": -1})
    # a refused setting changes nothing: the next push is summed exactly
    kv.init(1, full(0))
    kv.push(1, [full(0.3, ctx=CPUS[0]), full(0.3, ctx=CPUS[1])])
    out = mx.nd.zeros(SHAPE)
    kv.pull(1, out=out)
    assert_all(out, np.float32(0.3) + np.float32(0.3))


@pytest.mark.skipif(IS_REFERENCE, reason="MXNet fails inside an engine op (its kernel's type "
                    "check), and that error surfaces in later, unrelated tests of the same process")
def test_compression_takes_float32_only():
    """MXNet's 2bit kernels read float32 only. libkvstore refuses a compressed push of another
    dtype with the reason and keeps the stored value."""
    kv = mx.kv.create("device")
    kv.set_gradient_compression({"type": "2bit"})
    kv.init(1, full(5, dtype="float64"))
    with pytest.raises(MXNetError, match="only supported for float32"):
        kv.push(1, [full(1, ctx=CPUS[0], dtype="float64"), full(1, ctx=CPUS[1], dtype="float64")])
    kept = full(0, dtype="float64")
    kv.pull(1, out=kept)
    assert_all(kept, 5)
