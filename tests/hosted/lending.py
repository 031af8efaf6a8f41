"""Hosted mode lends plain CPU host arrays to the store in place (src/hosted/lent.rs), run in
hosted mode (and, where the values are the point, on pure MXNet too):
- from an array's third call on, a push and a pull make no host copy at all (the host's
  profiler counts no `MXImperativeInvoke` and no `CopyCPU2CPU`); the first two calls stage it
  (the second also probes its layout);
  with KVSTORE_HOSTED_ZERO_COPY=0 every call copies, as before lending;
- oneDNN layouts are never read or written as plain memory: a fresh convolution output pushed
  every call, weights an inference-mode convolution laid out anew pulled into, a convolution
  output recomputed into the same array each call;
- one array as a push-pull's value and output (Gluon's in-place allreduce), two handles of one
  array in one call (no wait on itself), and views (slices) keep their values and neighbours.
usage: lending.py hosted|pure [naive]   (naive: the host runs MXNET_ENGINE_TYPE=NaiveEngine)
"""
import atexit
import os
import shutil
import sys
import tempfile

import mxnet as mx
import numpy as np

mode = sys.argv[1]
hosted = mode == "hosted"
lending = hosted and os.environ.get("KVSTORE_HOSTED_ZERO_COPY", "1") != "0"
ctxs = [mx.cpu(0), mx.cpu(1)]


PROFILE_DIR = tempfile.mkdtemp(prefix="kvstore-lending-")
atexit.register(shutil.rmtree, PROFILE_DIR, True)
PROFILE = os.path.join(PROFILE_DIR, "profile.json")


def host_counts(calls, *names):
    """The host profiler's count of each of `names` (operators, the store's ops) while `calls`
    runs, then a wait for everything."""
    # A file of our own: MXNet's profiler unlinks its file when configured, which for os.devnull
    # as root replaces the machine's /dev/null with a regular file.
    mx.profiler.set_config(profile_all=True, aggregate_stats=True, filename=PROFILE)
    mx.profiler.set_state("run")
    calls()
    mx.nd.waitall()
    mx.profiler.set_state("stop")
    table = mx.profiler.dumps(reset=True)
    count = lambda name: sum(int(l.split()[1]) for l in table.splitlines() if l.split()[:1] == [name])
    return tuple(count(n) for n in names)


def profiled(calls):
    """The host's count of operator invocations and CPU copies while `calls` runs."""
    return host_counts(calls, "MXImperativeInvoke", "CopyCPU2CPU")


# 1. No copy from an array's third call on.
kv = mx.kv.create("device")
kv.init(0, mx.nd.zeros((1000,)))
grads = [mx.nd.ones((1000,), ctx=c) * (i + 1) for i, c in enumerate(ctxs)]
outs = [mx.nd.zeros((1000,), ctx=c) for c in ctxs]
step = lambda: (kv.push(0, grads), kv.pull(0, out=outs))
if hosted:
    first = profiled(lambda: [step(), step()])
    later = profiled(lambda: [step() for _ in range(3)])
    print("copies of the first two calls:", "some" if first[1] else "none")
    if lending:
        assert first[1] > 0, first
        assert later == (0, 0), later
        print("copies of later calls: none")
    else:
        assert later[1] >= 12, later
        print("copies of later calls (KVSTORE_HOSTED_ZERO_COPY=0): every value and output")
else:
    step()
for o in outs:
    assert (o.asnumpy() == 3).all(), o.asnumpy()[:3]
print("pushed and pulled values: ok")

# 2. A fresh convolution output every call (oneDNN lays it out in blocks when its op runs).
x = mx.nd.array(np.random.RandomState(0).uniform(-1, 1, (2, 8, 12, 12)))
w = mx.nd.array(np.random.RandomState(1).uniform(-1, 1, (16, 8, 3, 3)))
conv = lambda data, weight, **kw: mx.nd.Convolution(data, weight, no_bias=True, kernel=(3, 3), num_filter=16, **kw)
kv.init(1, mx.nd.zeros((2, 16, 10, 10)))
out = mx.nd.zeros((2, 16, 10, 10))
for scale in (1, 2, 3):
    y = conv(x * scale, w)
    kv.push(1, [y, y * 2])
    kv.pull(1, out=out)
    expect = 3 * y.asnumpy()
    assert np.allclose(out.asnumpy(), expect, rtol=1e-5, atol=1e-5), abs(out.asnumpy() - expect).max()
print("fresh convolution outputs pushed: ok")

# 3. The same array recomputed by a convolution each call, then pushed, with and without a
# wait between calls (a pending convolution may lay it out in blocks after the call).
y = mx.nd.zeros((2, 16, 10, 10))
for scale in (1, 2, 3, 4, 5):
    conv(x * scale, w, out=y)
    kv.push(1, y)
    kv.pull(1, out=out)
    assert np.allclose(out.asnumpy(), y.asnumpy(), rtol=1e-5, atol=1e-5)
y2 = mx.nd.zeros((2, 16, 10, 10))
outs2 = []
for scale in range(1, 7):
    conv(x * scale, w, out=y2)
    kv.push(1, y2)
    o = mx.nd.zeros((2, 16, 10, 10))
    kv.pull(1, out=o)
    outs2.append((scale, o))
for scale, o in outs2:
    expect = conv(x * scale, w).asnumpy()
    assert np.allclose(o.asnumpy(), expect, rtol=1e-5, atol=1e-5), (scale, abs(o.asnumpy() - expect).max())
print("a convolution output recomputed in place, pushed: ok")

# 4. Pulled into weights that an inference-mode convolution laid out anew.
kv.init(2, w * 0.5)
weight = w.copy()
for _ in range(3):
    conv(x, weight).wait_to_read()   # not recording: oneDNN may reorder `weight` itself
    kv.pull(2, out=weight)
    got = conv(x, weight).asnumpy()
    expect = conv(x, w * 0.5).asnumpy()
    assert np.allclose(got, expect, rtol=1e-5, atol=1e-5), abs(got - expect).max()
    assert np.allclose(weight.asnumpy(), (w * 0.5).asnumpy())
print("pulled into weights a convolution laid out anew: ok")

# 5. One array as a push-pull's value and output, on every context (Gluon's allreduce).
kv.init(3, mx.nd.zeros((64,)))
arrays = [mx.nd.ones((64,), ctx=c) * (i + 2) for i, c in enumerate(ctxs)]
for _ in range(3):
    before = sum(a.asnumpy() for a in arrays)
    kv.pushpull(3, arrays, out=arrays)
    for a in arrays:
        assert (a.asnumpy() == before).all(), (a.asnumpy()[:3], before[:3])
print("push-pull in place: ok")

# 6. Two handles of one array in one call (a reshaped view): each read once, no self-wait.
kv.init(4, mx.nd.zeros((4, 16)))
flat = mx.nd.ones((64,)) * 3
for _ in range(3):
    kv.push(4, [flat.reshape((4, 16)), flat.reshape((4, 16))])
    o = mx.nd.zeros((4, 16))
    kv.pull(4, out=[o, flat.reshape((4, 16))])
    assert (o.asnumpy() == 6).all() and (flat.asnumpy() == 6).all(), (o.asnumpy()[0, :3], flat.asnumpy()[:3])
    flat[:] = 3
print("two handles of one array in a call: ok")

# 7. Views: a slice pushed and pulled into a slice leaves the other rows alone.
big = mx.nd.arange(0, 40).reshape((10, 4))
kv.init(5, mx.nd.zeros((2, 4)))
for _ in range(3):
    kv.push(5, big[2:4])
    dst = mx.nd.ones((10, 4)) * -1
    kv.pull(5, out=dst[6:8])
    d = dst.asnumpy()
    assert (d[6:8] == big.asnumpy()[2:4]).all() and (d[:6] == -1).all() and (d[8:] == -1).all(), d
print("views: ok")

# 8. An updater handed the one pushed value itself, a fresh array every call (so always
# staged: the updater gets the staging array, on the staging array's own dependency): each
# call's copy into it lands before the store and the updater read it, call after call.
def add_in_place(key, recv, local):
    local[:] = local + recv


kv8 = mx.kv.create("local")
kv8._set_updater(add_in_place)
n8 = 256
kv8.init(8, mx.nd.zeros((n8, n8)))
unit = mx.nd.ones((n8, n8)) / n8
for call in range(1, 5):
    chain = unit
    for _ in range(40):
        chain = mx.nd.dot(chain, unit)   # ones/n8 again, once the chain is done
    kv8.push(8, chain * (n8 * call))    # a fresh array of `call`s
    out8 = mx.nd.zeros((n8, n8))
    kv8.pull(8, out=out8)
    total = call * (call + 1) / 2
    assert np.allclose(out8.asnumpy(), total), (call, out8.asnumpy()[0, :3])
print("an updater handed a fresh pushed value every call: ok")

# 9. A big key's pull queued right behind its push joins the push's sum (src/engine/
# host_extend.rs): the sum writes the pulled outputs in its own pass, under a guard op holding
# them. The first pushed value is written by a slow chain of host ops, so that the sum is still
# waiting when the pull comes. Values every call, with host ops on the pushed arrays and the
# outputs queued between the push and the pull every other call (a write of a pushed array waits
# for the sum's read; an output's earlier writer goes first and the pull overwrites it).
kv9 = mx.kv.create("device")
shape9 = (256, 2048)                 # 2 MiB of float32: big enough to be joined
kv9.init(9, mx.nd.zeros(shape9))
grads9 = [mx.nd.zeros(shape9, ctx=c) for c in ctxs]
outs9 = [mx.nd.zeros(shape9, ctx=c) for c in ctxs]
unit9 = mx.nd.ones((256, 256)) / 256
pull_ops = []
for call in range(1, 9):
    slow = unit9
    for _ in range(40):
        slow = mx.nd.dot(slow, unit9)    # ones/256 again, once the chain is done
    grads9[0][:] = mx.nd.tile(slow, (1, 8)) * (256 * call)
    grads9[1][:] = 2 * call
    def step9():
        kv9.push(9, grads9)
        if call % 2 == 0:
            for g, o in zip(grads9, outs9):
                g[:] = g * 2                 # waits for the sum's read
                o[:] = g + 1                 # then overwritten by the pull
        kv9.pull(9, out=outs9)
    if hosted and call >= 4:
        pull_ops += host_counts(step9, "KVStorePull")
    else:
        step9()
    for o in outs9:
        got = o.asnumpy()
        assert np.allclose(got, 3 * call), (call, got[0, :3])
    for i, g in enumerate(grads9):
        assert np.allclose(g.asnumpy(), call * (i + 1) * (2 if call % 2 == 0 else 1)), call
if pull_ops:
    # Joined: a guard and a reader for the pull (two host ops); a copy op otherwise (one).
    print("host ops of a big key's pulls behind their pushes:", pull_ops)
    # Under NaiveEngine the push's op has run by the time the pull comes: nothing to join.
    if lending and sys.argv[2:] != ["naive"]:
        assert pull_ops == [2] * len(pull_ops), pull_ops
print("a big key's pull behind its push: ok")
