"""The wheel carries a native library built outside setuptools (scripts/wheel.sh copies
libkvstore.so into kvstore/): tag it for the platform, for any Python 3, with no ABI of
CPython's (the library is loaded with ctypes, not as an extension module)."""

from setuptools import Distribution, setup

try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # setuptools < 70
    from wheel.bdist_wheel import bdist_wheel


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


setup(cmdclass={"bdist_wheel": PlatformWheel}, distclass=BinaryDistribution)
