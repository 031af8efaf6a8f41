"""Asks the library under MXNET_LIBRARY_PATH for a dist_sync store, as a job's every process
does on `import mxnet` (servers) or kv.create (workers). Used by scripts/dist-python.sh to
tell "this library has no dist store" (the Create answers an error: its message is written to
$DIST_PROBE_OUT/create-failed-<pid>.txt, exit 3) from a failing test."""
import os
import sys


def refused(err):
    out = os.environ.get("DIST_PROBE_OUT")
    if out:
        with open(os.path.join(out, "create-failed-%d.txt" % os.getpid()), "w") as f:
            f.write(str(err).strip().splitlines()[0] + "\n")
    print("dist Create failed: %s" % err, file=sys.stderr)
    sys.exit(3)


try:
    import mxnet as mx  # a server or scheduler serves here and exits
except Exception as err:  # the library's MXNetError, raised from kvstore_server on a server
    refused(err)
try:
    kv = mx.kv.create("dist_sync")
except mx.base.MXNetError as err:
    refused(err)
print("worker %d of %d: dist_sync created" % (kv.rank, kv.num_workers))
