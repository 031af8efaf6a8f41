"""scripts/check-docs.py on made-up projects: which reads of environment variables it finds,
and which links it refuses."""

import importlib.util
import pathlib
import tempfile
import unittest

ROOT = pathlib.Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("check_docs", ROOT / "scripts" / "check-docs.py")
check_docs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check_docs)


class Project:
    """A temporary project tree: write(path, text) adds a file."""

    def __init__(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.root = pathlib.Path(self.tmp.name)

    def write(self, rel, text):
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


class EnvironmentReads(unittest.TestCase):
    def reads(self, files):
        p = Project()
        self.addCleanup(p.tmp.cleanup)
        for rel, text in files.items():
            p.write(rel, text)
        return set(check_docs.environment_reads(p.root))

    def test_rust_reads_calls_and_prefixed_constants(self):
        found = self.reads({"src/a.rs": 'let a = std::env::var("SOME_SETTING");\nconst V: &str = "KVSTORE_THING";\nlet s = "not_a_var";'})
        self.assertEqual(found, {"SOME_SETTING", "KVSTORE_THING"})

    def test_c_and_python(self):
        found = self.reads({
            "ctests/a.c": 'const char *d = getenv("OUT_FOLDER");',
            "tests/x/t.py": 'import os\nos.environ.get("PY_ONE")\nos.environ["PY_TWO"]\nos.getenv("PY_THREE")',
        })
        self.assertEqual(found, {"OUT_FOLDER", "PY_ONE", "PY_TWO", "PY_THREE"})

    def test_python_package_and_its_build(self):
        found = self.reads({
            "packaging/python/kvstore/__init__.py": 'import os\nos.environ.get("PACKAGE_SETTING")',
            "setup.py": 'import os\nos.environ.get("BUILD_SETTING")',
        })
        self.assertEqual(found, {"PACKAGE_SETTING", "BUILD_SETTING"})

    def test_shell_defaults_and_unassigned_names(self):
        script = "\n".join([
            "#!/usr/bin/env bash",
            "# COMMENTED_OUT is only named in a comment",
            'dir="${WITH_DEFAULT:-/tmp}"',
            "LOCAL_NAME=1; echo $LOCAL_NAME",
            'echo "$FROM_ENV" \'$IN_SINGLE_QUOTES\' "$HOME"',
            "for LOOP_NAME in a b; do echo $LOOP_NAME; done",
        ])
        self.assertEqual(self.reads({"scripts/x.sh": script}), {"WITH_DEFAULT", "FROM_ENV"})

    def test_excluded_and_system_names(self):
        found = self.reads({
            "tests/dist_python/mxnet_script.py": 'os.environ.get("MXNET_OWN")',
            "src/b.rs": 'std::env::var("PATH"); std::env::var("KVSTORE_TEST_PS_VALUE");',
        })
        self.assertEqual(found, set())

    def test_missing_rows_are_named(self):
        p = Project()
        self.addCleanup(p.tmp.cleanup)
        p.write("docs/environment.md", "| variable | default | effect |\n|---|---|---|\n| `DOCUMENTED` | 1 | x |\n")
        p.write("src/a.rs", 'std::env::var("DOCUMENTED"); std::env::var("UNDOCUMENTED");')
        missing = set(check_docs.environment_reads(p.root)) - check_docs.documented_variables(p.root)
        self.assertEqual(missing, {"UNDOCUMENTED"})


class Links(unittest.TestCase):
    def test_files_and_anchors(self):
        p = Project()
        self.addCleanup(p.tmp.cleanup)
        p.write("README.md", "[ok](docs/a.md) [anchor](docs/a.md#the-c-api-coverage) [bad](docs/none.md) "
                             "[badanchor](docs/a.md#nowhere) [web](https://example.org/x.md)"
                             "\n```\n[in code](missing.md)\n```\n")
        p.write("CONTRIBUTING.md", "[self](#rules)\n## Rules\n")
        p.write("docs/a.md", "# A\n## The C API: `coverage`\n")
        broken = check_docs.broken_links(p.root)
        self.assertEqual(broken, [
            "README.md: docs/none.md (no such file)",
            "README.md: docs/a.md#nowhere (no heading #nowhere in a.md)",
        ])

    def test_anchor_is_githubs(self):
        self.assertEqual(check_docs.anchor("Launching: `scripts/kvstore-launch`"), "launching-scriptskvstore-launch")
        self.assertEqual(check_docs.anchor("MXNet's frontends on libkvstore.so"), "mxnets-frontends-on-libkvstoreso")


if __name__ == "__main__":
    unittest.main()
