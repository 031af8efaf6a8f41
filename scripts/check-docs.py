#!/usr/bin/env python3
"""Checks the documentation against the code (run by scripts/test.sh):

1. every environment variable the code reads is a row of docs/environment.md. Scope: the
   library (src/, build.rs), the MPI plugin (mpi-transport/), the CUDA stand-in
   (cuda-standin/), the scripts (scripts/, .ci/, bindings/, benches/), the Python package and
   its build (packaging/, setup.py) and the test harnesses (tests/, ctests/), except MXNet's own scripts copied under tests/dist_python/ and the
   fixtures of this checker's tests (tests/docs/). What counts
   as a read: Rust `env::var("X")`/`var_os`, C `getenv("X")`, Python `os.environ.get("X")`,
   `os.environ["X"]`, `os.getenv("X")`; shell `${X:-...}`-style expansions and any `$X` or
   `${X}` of a name the script does not assign itself. The shell's and the system's own
   variables (PATH, HOME, ...; SYSTEM below) are left out.
2. every relative link in README.md, CONTRIBUTING.md and docs/*.md resolves: the file
   exists and, for `file.md#anchor`, the file has a heading with that GitHub anchor.

With --list-env, prints the variables found (name and the files reading it) and exits.
"""

import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
SCOPE = ["src", "build.rs", "mpi-transport", "cuda-standin", "scripts", ".ci", "bindings", "benches", "packaging", "setup.py", "tests", "ctests"]
# MXNet's own scripts, and this checker's tests (made-up names in their fixtures).
EXCLUDE = ["tests/dist_python/", "tests/docs/"]
SYSTEM = {
    "PATH", "HOME", "PWD", "OLDPWD", "USER", "SHELL", "TERM", "TMPDIR", "IFS", "UID", "EUID",
    "RANDOM", "SECONDS", "LINENO", "BASH_SOURCE", "BASH_REMATCH", "PIPESTATUS", "OSTYPE",
    "HOSTNAME", "CARGO", "OUT_DIR", "CARGO_CFG_TARGET_ARCH", "CARGO_MANIFEST_DIR", "PYTHONPATH", "CC", "CXX", "CFLAGS",
    "LDFLAGS", "PKG_CONFIG_PATH", "CMAKE_PREFIX_PATH", "LD_PRELOAD", "VIRTUAL_ENV",
}
# Made-up names, not settings: unit tests of MXInitPSEnv's table (src/store/env.rs).
NOT_SETTINGS = {"KVSTORE_TEST_PS_VALUE", "KVSTORE_TEST_PS_UNSET"}
NAME = r"[A-Z][A-Z0-9_]*[A-Z0-9]"
# Rust and Python often name a variable in a constant or pass it to a helper: any string
# literal of a name with one of these prefixes counts as a read there.
PREFIXED = re.compile(r'["\'](' + r"(?:KVSTORE|MXNET|DMLC|CUDA_STANDIN|PS|OMPI|PMIX|PMI)_[A-Z0-9_]*[A-Z0-9]" + r')["\']')
RUST = re.compile(r'env::var(?:_os)?\(\s*"(' + NAME + r')"')
C = re.compile(r'getenv\(\s*c?"(' + NAME + r')"')
PY = re.compile(r'(?:os\.environ\.get\(|os\.environ\[|os\.getenv\(|environ\.get\()\s*["\'](' + NAME + r')["\']')
SH_DEFAULT = re.compile(r'\$\{(' + NAME + r')(?::?[-+?=])')
SH_USE = re.compile(r'\$\{?(' + NAME + r')\b')
SH_ASSIGN = re.compile(r'(?:^|[\s;&|(])(?:export\s+|local\s+|declare\s+(?:-\w+\s+)*|readonly\s+)?(' + NAME + r')=|\bfor\s+(' + NAME + r')\s+in\b|\bread\s+(?:-\w+\s+)*(' + NAME + r')\b')


def is_shell(path, text):
    return path.suffix in (".sh", ".bash") or text.startswith("#!/usr/bin/env bash") or text.startswith("#!/bin/sh") or text.startswith("#!/bin/bash")


def shell_assigned(text):
    return {n for groups in SH_ASSIGN.findall(text) for n in groups if n}


def reads(path, text, assigned_anywhere):
    """The variables `text` reads; `assigned_anywhere`: names some project shell script
    assigns in a `common.sh` (bindings/*/build.sh read ROOT from the one they source)."""
    found = set()
    if path.suffix == ".rs":
        found |= set(RUST.findall(text)) | set(C.findall(text)) | set(PREFIXED.findall(text))
    elif path.suffix in (".c", ".h", ".cc", ".cpp"):
        found |= set(C.findall(text))
    elif path.suffix == ".py" or text.startswith("#!/usr/bin/env python"):
        found |= set(PY.findall(text)) | set(PREFIXED.findall(text))
    elif is_shell(path, text):
        found |= set(SH_DEFAULT.findall(text))
        code = re.sub(r"^\s*#.*$", "", text, flags=re.M)  # comments name variables freely
        unquoted = re.sub(r"'[^'\n]*'", "", code)  # no expansion inside single quotes
        found |= {n for n in SH_USE.findall(unquoted) if n not in shell_assigned(text) | assigned_anywhere}
    return found - SYSTEM - NOT_SETTINGS


def sources(root):
    """(path, relative path, text) of every text file in scope under `root`."""
    for top in SCOPE:
        base = root / top
        files = [base] if base.is_file() else sorted(p for p in base.rglob("*") if p.is_file())
        for path in files:
            rel = path.relative_to(root).as_posix()
            if any(rel.startswith(e) for e in EXCLUDE) or "/target/" in rel:
                continue
            try:
                yield path, rel, path.read_text()
            except (UnicodeDecodeError, OSError):
                continue


def environment_reads(root=ROOT):
    """{variable: [files reading it]} for the project at `root`."""
    files = list(sources(root))
    assigned_anywhere = set()
    for path, _, text in files:
        if is_shell(path, text) and path.name == "common.sh":
            assigned_anywhere |= shell_assigned(text)
    where = {}
    for path, rel, text in files:
        for name in reads(path, text, assigned_anywhere):
            where.setdefault(name, []).append(rel)
    return where


def documented_variables(root=ROOT):
    page = (root / "docs" / "environment.md").read_text()
    # A variable is documented by a table row whose first cell names it.
    return set(re.findall(r"^\|\s*`(" + NAME + r")`", page, re.M))


def anchor(heading):
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path):
    found, seen = set(), {}
    in_code = False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            in_code = not in_code
        m = None if in_code else re.match(r"^#{1,6}\s+(.*)$", line)
        if m:
            a = anchor(m.group(1))
            n = seen.get(a, 0)
            seen[a] = n + 1
            found.add(a if n == 0 else f"{a}-{n}")
    return found


def broken_links(root=ROOT):
    """What does not resolve among the relative links of the pages under `root`."""
    pages = [root / "README.md", root / "CONTRIBUTING.md"] + sorted((root / "docs").glob("*.md"))
    broken = []
    for page in pages:
        if not page.exists():
            broken.append(f"{page.relative_to(root)}: missing")
            continue
        text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"^[a-z]+:", target):
                continue  # http(s), mailto: not checked here
            file_part, _, frag = target.partition("#")
            dest = page if not file_part else (page.parent / file_part).resolve()
            if not dest.exists():
                broken.append(f"{page.relative_to(root)}: {target} (no such file)")
            elif frag and dest.suffix == ".md" and frag not in anchors(dest):
                broken.append(f"{page.relative_to(root)}: {target} (no heading #{frag} in {dest.name})")
    return broken


def main():
    where = environment_reads()
    if "--list-env" in sys.argv:
        for name in sorted(where):
            print(name, " ".join(sorted(set(where[name]))))
        return 0
    failed = False
    missing = sorted(set(where) - documented_variables())
    if missing:
        failed = True
        print(f"docs/environment.md has no row for {len(missing)} variable(s) the code reads:", file=sys.stderr)
        for name in missing:
            print(f"  {name}  (read in {', '.join(sorted(set(where[name]))[:4])})", file=sys.stderr)
        print("add a row `| `NAME` | default | effect |` for each", file=sys.stderr)
    broken = broken_links()
    if broken:
        failed = True
        print("links that do not resolve:", file=sys.stderr)
        for b in broken:
            print(f"  {b}", file=sys.stderr)
    if failed:
        return 1
    print(f"docs: {len(where)} environment variables documented, every relative link resolves")
    return 0


if __name__ == "__main__":
    sys.exit(main())
