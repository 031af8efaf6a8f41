"""An SGD optimizer for tests/hosted/server_updater_failure.py whose update fails, on the
server, in one of two ways: `python` raises in the Python updater itself (ctypes prints the
traceback and returns, as in MXNet: the job goes on), `host` queues a host operator that fails
inside MXNet's engine (a custom op raising in its forward), which MXNet reports at the next
wait on the weight. Importable by name, so that the server can unpickle the optimizer; the
server unpickles it while `import mxnet` is still running (MXNet starts the server loop from
there), so only the parts of mxnet already imported are used at import time.
"""
from mxnet.optimizer import SGD

_registered = []


def _register_failing_op():
    """Registers the custom op `test_fail`, whose forward raises."""
    from mxnet import operator

    class Fail(operator.CustomOp):
        def forward(self, is_train, req, in_data, out_data, aux):
            raise ValueError("the test's custom op fails in the host's engine")

        def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
            raise NotImplementedError

    @operator.register("test_fail")
    class FailProp(operator.CustomOpProp):
        def __init__(self):
            super().__init__(need_top_grad=False)

        def list_arguments(self):
            return ["data"]

        def list_outputs(self):
            return ["output"]

        def infer_shape(self, in_shape):
            return in_shape, [in_shape[0]], []

        def create_operator(self, ctx, shapes, dtypes):
            return Fail()

    _registered.append(FailProp)


class FailingSGD(SGD):
    def __init__(self, how="python", **kwargs):
        super().__init__(**kwargs)
        self.how = how

    def update_multi_precision(self, index, weight, grad, state):
        if self.how == "python":
            raise TypeError("the test's optimizer raises in Python")
        from mxnet import ndarray as nd
        if not _registered:
            _register_failing_op()
        # MXNet 1.9's updater hands over lists (aggregated updates).
        pairs = zip(weight, grad) if isinstance(weight, (list, tuple)) else [(weight, grad)]
        for w, g in pairs:
            w[:] = nd.Custom(g, op_type="test_fail")
