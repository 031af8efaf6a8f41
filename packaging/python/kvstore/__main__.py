"""``python -m kvstore [--native] script.py [args...]``: runs an unchanged MXNet 1.9 script
(or ``-m module``, or any Python arguments) with libkvstore as MXNet's library, hosted over
the installed mxnet package's own libmxnet.so when there is one.

``--native``: libkvstore alone (no MXNet operators: the store and NDArray API only).
``--print-library``: print the path of the wheel's libkvstore.so and exit.

Without a usable library (missing, or the loader refuses it) it runs nothing: it prints the
library's path and the reason on stderr and exits with status 1. Running the script anyway
would train on MXNet's own store, MXNet's package falling back to its libmxnet.so.
"""

import os
import sys

from . import LibraryError, check_library, environment

USAGE = "usage: python -m kvstore [--native] script.py [args...]  |  python -m kvstore --print-library"


def main(argv):
    hosted = True
    while argv and argv[0].startswith("--"):
        flag = argv.pop(0)
        if flag == "--print-library":
            try:
                print(check_library())
            except LibraryError as e:
                print(f"python -m kvstore: {e}", file=sys.stderr)
                return 1
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
    try:
        env.update(environment(hosted))
    except LibraryError as e:
        print(f"python -m kvstore: {e}\npython -m kvstore: not running {' '.join(argv)}", file=sys.stderr)
        return 1
    # A fresh interpreter, so that the variables are in place before anything imports mxnet
    # and the script runs exactly as `python script.py` would.
    os.execve(sys.executable, [sys.executable] + argv, env)
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
