"""Raw push + pull through an unchanged MXNet `device` (or `local`) store: the keys of a
workload pushed from N CPU contexts in one call and pulled into N outputs in one call, then
a wait for everything. Prints the seconds of each measured iteration, one a line, so the
caller can take medians across processes (benches/hosted-kv.sh runs it on pure MXNet and in
hosted mode, taking turns).

usage: python hosted_kv.py WORKLOAD NCTX WARMUP ITERS [STORE]
  WORKLOAD: resnet50 (the 161 ResNet-50 v1 tensors, 25.6 M values) or small (2000 x 1024)
"""
import sys
import time

import mxnet as mx


def resnet50():
    sizes = [64 * 3 * 7 * 7, 64, 64]
    inp = 64
    for stage, blocks in enumerate([3, 4, 6, 3]):
        mid = 64 << stage
        out = mid * 4
        for b in range(blocks):
            sizes += [mid * inp, mid, mid, mid * mid * 9, mid, mid, out * mid, out, out]
            if b == 0:
                sizes += [out * inp, out, out]
            inp = out
    return sizes + [1000 * 2048, 1000]


def main():
    workload, nctx, warmup, iters = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    store = sys.argv[5] if len(sys.argv) > 5 else "device"
    sizes = {"resnet50": resnet50, "small": lambda: [1024] * 2000}[workload]()
    kv = mx.kv.create(store)
    keys = list(range(len(sizes)))
    ctxs = [mx.cpu(i) for i in range(nctx)]
    kv.init(keys, [mx.nd.zeros((n,)) for n in sizes])
    grads = [[mx.nd.ones((n,), ctx=c) for c in ctxs] for n in sizes]
    outs = [[mx.nd.zeros((n,), ctx=c) for c in ctxs] for n in sizes]
    mx.nd.waitall()
    for i in range(warmup + iters):
        start = time.perf_counter()
        kv.push(keys, grads)
        kv.pull(keys, outs)
        mx.nd.waitall()
        took = time.perf_counter() - start
        if i >= warmup:
            print(f"{took:.6f}")
    # Without an updater the stored value is the last push's sum: a wrong store shows here.
    expect = float(nctx)
    got = outs[-1][-1][:1].asnumpy()[0]
    if got != expect:
        sys.exit(f"pulled {got}, expected {expect}")


if __name__ == "__main__":
    main()
