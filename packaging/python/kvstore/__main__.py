"""``python -m kvstore [--native] script.py [args...]``: runs an unchanged MXNet 1.9 script
(or ``-m module``, or any Python arguments) with libkvstore as MXNet's library, hosted over
the installed mxnet package's own libmxnet.so when there is one.

``--native``: libkvstore alone (no MXNet operators: the store and NDArray API only).
``--print-library``: print the path of the wheel's libkvstore.so and exit.
"""

import os
import sys

from . import environment, library_path

USAGE = "usage: python -m kvstore [--native] script.py [args...]  |  python -m kvstore --print-library"


def main(argv):
    hosted = True
    while argv and argv[0].startswith("--"):
        flag = argv.pop(0)
        if flag == "--print-library":
            print(library_path())
            return 0
        if flag == "--native":
            hosted = False
        elif flag in ("--help", "-h"):
            print(USAGE)
            return 0
        else:
            print(f"python -m kvstore: unknown option {flag}\n{USAGE}", file=sys.stderr)
            return 2
    if not argv:
        print(USAGE, file=sys.stderr)
        return 2
    env = dict(os.environ)
    if not hosted:
        env.pop("KVSTORE_HOST_LIBRARY", None)
    env.update(environment(hosted))
    # A fresh interpreter, so that the variables are in place before anything imports mxnet
    # and the script runs exactly as `python script.py` would.
    os.execve(sys.executable, [sys.executable] + argv, env)
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
