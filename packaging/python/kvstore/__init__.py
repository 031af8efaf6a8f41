"""libkvstore for the unchanged MXNet 1.9 Python package.

The wheel carries ``libkvstore.so``. MXNet's Python package loads the library that
``MXNET_LIBRARY_PATH`` names (an absolute path; ``mxnet/libinfo.py``), and libkvstore runs in
hosted mode (MXNet's operators, libkvstore's store) when ``KVSTORE_HOST_LIBRARY`` names a
real ``libmxnet.so`` 1.9.x. ``python -m kvstore script.py`` sets both (``__main__.py``);
``environment()`` gives them to programs that start MXNet themselves.

Neither runs without the library: MXNet's Python package, given a ``MXNET_LIBRARY_PATH`` it
cannot use, warns and loads its own libmxnet.so, which would run the script on MXNet's store
as if libkvstore were there. ``check_library()`` loads the library first and raises
``LibraryError`` (its path, and why) when it is missing or cannot be loaded.
"""

import ctypes
import importlib.util
import os

__all__ = ["library_path", "host_library", "environment", "check_library", "LibraryError"]

# A function of MXNet's C API that every libkvstore.so exports.
_KVSTORE_SYMBOL = "MXKVStoreCreate"


class LibraryError(OSError):
    """The wheel's libkvstore.so is missing or cannot be loaded."""


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


def check_library(path=None):
    """Loads the wheel's libkvstore.so (or ``path``) to prove it usable and returns its path;
    raises ``LibraryError`` naming the path and the reason when it is missing, cannot be
    loaded (the loader's message) or is not a KVStore library."""
    path = path or library_path()
    if not os.path.isfile(path):
        raise LibraryError(f"the library {path} is missing: this install of the libkvstore "
                           "package has no libkvstore.so (it was removed, or the wheel was built without "
                           "it); reinstall the package (`pip install --force-reinstall libkvstore`, or "
                           "`pip install .` in libkvstore's source tree)")
    # libkvstore loads the host library named by KVSTORE_HOST_LIBRARY as it is loaded itself;
    # this check only needs libkvstore, so the variable is away while it loads.
    host = os.environ.pop("KVSTORE_HOST_LIBRARY", None)
    try:
        library = ctypes.CDLL(path)
    except OSError as e:
        raise LibraryError(f"the library {path} cannot be loaded: {e}") from None
    finally:
        if host is not None:
            os.environ["KVSTORE_HOST_LIBRARY"] = host
    if not hasattr(library, _KVSTORE_SYMBOL):
        raise LibraryError(f"the library {path} cannot be used: it does not export "
                           f"{_KVSTORE_SYMBOL}, so it is not a KVStore library")
    return path


def environment(hosted=True):
    """The variables that make ``import mxnet`` use libkvstore: ``MXNET_LIBRARY_PATH`` and,
    if ``hosted`` and mxnet's own library is installed, ``KVSTORE_HOST_LIBRARY`` (a value
    already in the environment is kept). Raises ``LibraryError`` when the library is missing
    or cannot be loaded (``check_library()``)."""
    check_library()
    env = {"MXNET_LIBRARY_PATH": library_path()}
    host = os.environ.get("KVSTORE_HOST_LIBRARY") or (host_library() if hosted else None)
    if hosted and host:
        env["KVSTORE_HOST_LIBRARY"] = host
    return env
