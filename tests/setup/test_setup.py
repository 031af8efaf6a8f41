"""scripts/setup.sh: the libclang check bindgen needs, and what it does for the missing
Debian packages as root and as another user (made-up directories and a fake apt-get; nothing
is installed)."""

import os
import pathlib
import shutil
import subprocess
import tempfile
import unittest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SETUP = ROOT / "scripts" / "setup.sh"


def bash(script, env=None):
    """Runs `script` in bash after sourcing scripts/setup.sh (which then defines only its
    functions)."""
    return subprocess.run(
        ["bash", "-c", f". {SETUP}; {script}"],
        capture_output=True, text=True, env=env, timeout=60,
    )


class LibclangDetection(unittest.TestCase):
    def found_with(self, *names):
        with tempfile.TemporaryDirectory() as d:
            for name in names:
                (pathlib.Path(d) / name).touch()
            return bash(f"bindgen_libclang_found {d}").returncode == 0

    def test_libclang_cpp_alone_is_not_libclang(self):
        # A fresh Debian has libclang-cpp14 without libclang-dev: bindgen cannot use it.
        self.assertFalse(self.found_with("libclang-cpp.so.14", "libclang-cpp.so"))

    def test_versioned_runtime_alone_is_not_enough(self):
        self.assertFalse(self.found_with("libclang.so.1", "libclang-14.so.1", "libclangAST.a"))

    def test_dev_links_are_found(self):
        self.assertTrue(self.found_with("libclang.so"))
        self.assertTrue(self.found_with("libclang-14.so"))

    def test_any_of_several_directories(self):
        with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
            (pathlib.Path(b) / "libclang-16.so").touch()
            self.assertEqual(bash(f"bindgen_libclang_found {a} {b}").returncode, 0)
            self.assertNotEqual(bash(f"bindgen_libclang_found {a}").returncode, 0)


class MissingPackages(unittest.TestCase):
    """A PATH holding only what setup.sh itself runs, a fake apt-get that records its
    arguments, and no libclang: every package but python3-venv is missing."""

    def setUp(self):
        self.dir = pathlib.Path(tempfile.mkdtemp())
        self.addCleanup(shutil.rmtree, self.dir)
        bin_dir = self.dir / "bin"
        bin_dir.mkdir()
        for tool in ["bash", "python3", "id", "mktemp", "cat", "rm", "awk", "grep", "basename", "dirname"]:
            (bin_dir / tool).symlink_to(shutil.which(tool))
        self.apt_log = self.dir / "apt.log"
        apt = bin_dir / "apt-get"
        apt.write_text(f'#!/bin/sh\necho "$*" >> {self.apt_log}\n')
        apt.chmod(0o755)
        self.env = {"PATH": str(bin_dir), "HOME": str(self.dir)}

    def install(self, uid):
        env = dict(self.env, KVSTORE_SETUP_UID=str(uid))
        # No libclang anywhere here: the real directories of this machine would have one.
        return bash("bindgen_libclang_found() { return 1; }; install_packages", env)

    def test_not_root_stops_with_the_exact_line(self):
        out = self.install(1000)
        self.assertNotEqual(out.returncode, 0)
        self.assertIn(
            "sudo apt-get install -y gcc g++ valgrind cmake pkg-config openmpi-bin libopenmpi-dev libclang-dev",
            out.stderr,
        )
        self.assertFalse(self.apt_log.exists(), "apt-get ran without root")

    def test_root_installs_them(self):
        out = self.install(0)
        self.assertEqual(out.returncode, 0, out.stderr)
        calls = self.apt_log.read_text().splitlines()
        self.assertEqual(calls[0], "update -qq")
        self.assertEqual(
            calls[1],
            "install -y -qq gcc g++ valgrind cmake pkg-config openmpi-bin libopenmpi-dev libclang-dev",
        )

    def test_nothing_missing_is_silent(self):
        # This machine has everything (scripts/test.sh needs it): no output, no apt-get.
        out = subprocess.run(["bash", "-c", f". {SETUP}; KVSTORE_SETUP_UID=1000 install_packages"],
                             capture_output=True, text=True, timeout=60)
        self.assertEqual((out.returncode, out.stdout, out.stderr), (0, "", ""))


if __name__ == "__main__":
    unittest.main()
