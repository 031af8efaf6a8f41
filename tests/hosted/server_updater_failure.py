"""A dist_sync job whose optimizer runs on the server and fails there (tests/hosted/
failing_updater.py, HOW = python | host), then pulls. Each worker prints what it pulled.
usage: server_updater_failure.py HOW   (under a launcher, -n 2 -s 1)
"""
import sys

import mxnet as mx
from failing_updater import FailingSGD

kv = mx.kv.create("dist_sync")
kv.set_optimizer(FailingSGD(how=sys.argv[1], learning_rate=1.0, rescale_grad=1.0))
kv.init(0, mx.nd.ones((4, 4)))
kv.push(0, mx.nd.ones((4, 4)))
out = mx.nd.zeros((4, 4))
kv.pull(0, out=out)
print("rank", kv.rank, "pulled", out.asnumpy()[0, 0])
