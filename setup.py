"""Builds libkvstore's wheel: `pip wheel .`, `pip install .` and scripts/wheel.sh all come here.

The wheel is the `kvstore` package (packaging/python/kvstore/) plus the crate's own
libkvstore.so, which this build compiles: `cargo build --release --lib` of the crate at the
root (the very build every other script makes, so an up-to-date target/ is reused as is),
then the library, debug info stripped (`strip --strip-debug`), written as
kvstore/libkvstore.so. A failed or impossible build fails the wheel: there is no wheel
without its library.

The library is loaded with ctypes (by MXNet's Python package, through MXNET_LIBRARY_PATH),
not imported as an extension module, so the wheel is tagged for the platform, for any
Python 3, with no ABI of CPython's (py3-none-linux_<arch>; scripts/wheel.sh's `auditwheel
repair` turns linux_<arch> into the manylinux tag the library qualifies for).
"""

import json
import os
import re
import subprocess

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py
from setuptools.errors import SetupError

try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # setuptools < 70
    from wheel.bdist_wheel import bdist_wheel

ROOT = os.path.dirname(os.path.abspath(__file__))
LIBRARY = "libkvstore.so"


def declared_version(path):
    """The first `version = "..."` line of a TOML file (the [package] or [project] one)."""
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        found = re.search(r'^version = "([^"]+)"', f.read(), re.MULTILINE)
    if not found:
        raise SetupError(f"no version line in {path}")
    return found.group(1)


def build_library():
    """`cargo build --release --lib` of the crate; the path of the cdylib it made."""
    cargo = os.environ.get("CARGO", "cargo")
    command = [cargo, "build", "--release", "--lib", "--manifest-path", os.path.join(ROOT, "Cargo.toml"),
               "--message-format=json-render-diagnostics"]
    print("building libkvstore.so:", " ".join(command), flush=True)
    try:
        # stdout: cargo's JSON messages; stderr (the compiler's diagnostics) goes to the log.
        done = subprocess.run(command, cwd=ROOT, stdout=subprocess.PIPE, check=False)
    except FileNotFoundError:
        raise SetupError(f"the wheel compiles libkvstore.so with Rust's cargo, and `{cargo}` was not "
                         "found: install Rust (https://rustup.rs, the version Cargo.toml's "
                         "rust-version names or newer) or set CARGO to its path") from None
    if done.returncode != 0:
        raise SetupError(f"`{' '.join(command)}` failed (exit status {done.returncode}): see the errors above")
    found = []
    for line in done.stdout.decode("utf-8", "replace").splitlines():
        message = json.loads(line) if line.startswith("{") else {}
        target = message.get("target", {})
        if message.get("reason") == "compiler-artifact" and target.get("name") == "kvstore" and "cdylib" in target.get("kind", []):
            found += [f for f in message.get("filenames", []) if os.path.basename(f) == LIBRARY]
    if not found:
        raise SetupError(f"`{' '.join(command)}` reported no {LIBRARY}")
    return found[-1]


class BuildPyWithLibrary(build_py):
    """build_py, then the library: built by cargo, written stripped into the package."""

    def run(self):
        # An editable install (`pip install -e .`) imports the package from its sources.
        package = (os.path.join(ROOT, "packaging", "python", "kvstore") if getattr(self, "editable_mode", False)
                   else os.path.join(self.build_lib, "kvstore"))
        destination = os.path.join(package, LIBRARY)
        # setuptools keeps its build tree between builds: a library left there by an earlier
        # build must not reach this wheel if this build makes none.
        if os.path.lexists(destination):
            os.remove(destination)
        super().run()
        built = build_library()
        os.makedirs(package, exist_ok=True)
        print(f"stripping debug info: {built} -> {destination}", flush=True)
        try:
            subprocess.run(["strip", "--strip-debug", "-o", destination, built], check=True)
        except FileNotFoundError:
            raise SetupError("`strip` (GNU binutils) was not found: it removes the library's debug info") from None
        except subprocess.CalledProcessError as e:
            raise SetupError(f"`strip --strip-debug` of {built} failed (exit status {e.returncode})") from None

    def get_outputs(self, include_bytecode=True):
        return super().get_outputs(include_bytecode) + [os.path.join(self.build_lib, "kvstore", LIBRARY)]


class PlatformWheel(bdist_wheel):
    def finalize_options(self):
        super().finalize_options()
        self.root_is_pure = False

    def get_tag(self):
        _, _, platform = super().get_tag()
        return "py3", "none", platform


class BinaryDistribution(Distribution):
    """Installed under platlib, as auditwheel requires of a wheel with a shared library."""

    def has_ext_modules(self):
        return True


cargo_version, project_version = declared_version("Cargo.toml"), declared_version("pyproject.toml")
if cargo_version != project_version:
    raise SetupError(f"pyproject.toml has version {project_version}, Cargo.toml {cargo_version}: "
                     "the wheel's version is the library's")

# setuptools' own build tree and metadata go under target/ (ignored by git), not beside the sources.
os.makedirs(os.path.join(ROOT, "target", "python"), exist_ok=True)
setup(
    cmdclass={"build_py": BuildPyWithLibrary, "bdist_wheel": PlatformWheel},
    distclass=BinaryDistribution,
    options={"build": {"build_base": os.path.join("target", "python", "build")},
             "egg_info": {"egg_base": os.path.join("target", "python")}},
)
