"""libkvstore for the unchanged MXNet 1.9 Python package.

The wheel carries ``libkvstore.so``. MXNet's Python package loads the library that
``MXNET_LIBRARY_PATH`` names (an absolute path; ``mxnet/libinfo.py``), and libkvstore runs in
hosted mode (MXNet's operators, libkvstore's store) when ``KVSTORE_HOST_LIBRARY`` names a
real ``libmxnet.so`` 1.9.x. ``python -m kvstore script.py`` sets both (``__main__.py``);
``environment()`` gives them to programs that start MXNet themselves.
"""

import importlib.util
import os

__all__ = ["library_path", "host_library", "environment"]


def library_path():
    """The absolute path of the wheel's libkvstore.so."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "libkvstore.so")


def host_library():
    """The installed ``mxnet`` package's own libmxnet.so, or None. Found without importing
    mxnet: importing it would load a library before the variables are set."""
    spec = importlib.util.find_spec("mxnet")
    for directory in (spec.submodule_search_locations or []) if spec else []:
        candidate = os.path.join(directory, "libmxnet.so")
        if os.path.isfile(candidate):
            return os.path.abspath(candidate)
    return None


def environment(hosted=True):
    """The variables that make ``import mxnet`` use libkvstore: ``MXNET_LIBRARY_PATH`` and,
    if ``hosted`` and mxnet's own library is installed, ``KVSTORE_HOST_LIBRARY`` (a value
    already in the environment is kept)."""
    env = {"MXNET_LIBRARY_PATH": library_path()}
    host = os.environ.get("KVSTORE_HOST_LIBRARY") or (host_library() if hosted else None)
    if hosted and host:
        env["KVSTORE_HOST_LIBRARY"] = host
    return env
