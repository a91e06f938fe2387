# SPDX-License-Identifier: MIT
"""The env table (core/include/mori/core/env_defs.h) is the only reader of MORI_* / UMBP_*
variables and the library never writes the environment.

Scans the library's sources (every layer's folder, not tests/ or scripts/): C/C++ calls getenv()
only in core/src/env.cc (other programs' variables elsewhere are allow-listed with a reason),
nothing calls setenv/putenv, Python outside core/ reads no MORI_*/UMBP_* key of a mapping or
os.getenv, nothing writes os.environ, and every MORI_*/UMBP_* name the library or its shell
tools use as an environment key is a row of the table. Then the table's typed values, its alias
column and `mori info --env` are checked against fresh random values.
"""

from __future__ import annotations

import ast
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from mori import _C
from mori.core.env import env_table, setting
from mori.core.errors import InvalidArgument

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("core", "transports", "shmem", "collectives", "ep", "io", "umbp", "apps", "ir", "mori")
C_SUFFIXES = {".c", ".cc", ".cpp", ".h", ".hpp", ".cu", ".cuh"}
ENV_NAME = re.compile(r"^(MORI|UMBP)_[A-Z0-9_]+$")

# getenv() outside core/, file -> why it stays. None of these reads a MORI_*/UMBP_* name.
GETENV_ALLOWED = {
    "transports/ucx/ucx_transport.cc": "UCX_TLS is UCX's own variable; the error names what UCX was allowed",
    "shmem/capi/launch_bootstrap.cc": "launcher variables of other programs (Open MPI, PMI, torchrun's RANK...)",
    "umbp/src/standalone_server.cc": "XDG_RUNTIME_DIR: where a per-user socket lives by the XDG spec",
}
# Python reads of a MORI_* key outside the table, file -> why it stays.
PY_READ_ALLOWED = {
    "ir/build.py": "runs at build time before (and without) the native module: MORI_IR_CLANG from os.environ",
}


def _library_files(suffixes: set[str]) -> list[Path]:
    out = []
    for layer in LAYERS:
        for p in sorted((ROOT / layer).rglob("*")):
            if p.suffix in suffixes and p.is_file() and "__pycache__" not in p.parts:
                out.append(p)
    return out


def _rel(p: Path) -> str:
    return p.relative_to(ROOT).as_posix()


def _strip_c_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def c_env_violations(rel: str, text: str) -> list[str]:
    """getenv() outside the table's reader and the allow-list; any setenv/putenv/unsetenv."""
    found = []
    for lineno, line in enumerate(_strip_c_comments(text).splitlines(), 1):
        if re.search(r"\b(setenv|putenv|unsetenv)\s*\(", line):
            found.append(f"{rel}:{lineno}: writes the environment: {line.strip()}")
        if re.search(r"\bgetenv\s*\(", line) and rel != "core/src/env.cc":
            # core/ may read other programs' variables (launcher detection); MORI's only through the table
            mori_name = re.search(r'getenv\s*\(\s*"(MORI|UMBP|SHMEM)_', line)
            if mori_name or not (rel.startswith("core/") or rel in GETENV_ALLOWED):
                found.append(f"{rel}:{lineno}: reads the environment outside core's table: {line.strip()}")
    return found


def _is_os_environ(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "environ"
        and isinstance(node.value, ast.Name)
        and node.value.id == "os"
    )


def py_env_violations(rel: str, text: str) -> list[str]:
    """Writes to os.environ anywhere; reads of a MORI_*/UMBP_* key outside core/."""
    found = []
    may_read = rel.startswith("core/") or rel in PY_READ_ALLOWED
    for node in ast.walk(ast.parse(text)):
        where = f"{rel}:{getattr(node, 'lineno', 0)}"
        if (
            isinstance(node, ast.Subscript)
            and _is_os_environ(node.value)
            and isinstance(node.ctx, (ast.Store, ast.Del))
        ):
            found.append(f"{where}: writes os.environ")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            f = node.func
            if _is_os_environ(f.value) and f.attr in ("setdefault", "update", "pop", "popitem", "clear", "__setitem__"):
                found.append(f"{where}: writes os.environ ({f.attr})")
            if isinstance(f.value, ast.Name) and f.value.id == "os" and f.attr in ("putenv", "unsetenv"):
                found.append(f"{where}: writes the environment (os.{f.attr})")
            first = node.args[0] if node.args else None
            # (setdefault on a copy is a launcher filling its child's environment: a write, allowed)
            if (
                not may_read
                and f.attr in ("get", "getenv", "pop")
                and isinstance(first, ast.Constant)
                and isinstance(first.value, str)
                and ENV_NAME.match(first.value)
                and (f.attr != "getenv" or isinstance(f.value, ast.Name))
            ):
                found.append(f"{where}: reads {first.value} itself (use mori.core.env.setting)")
        if (
            not may_read
            and isinstance(node, ast.Subscript)
            and isinstance(node.ctx, ast.Load)
            and isinstance(node.slice, ast.Constant)
            and isinstance(node.slice.value, str)
            and ENV_NAME.match(node.slice.value)
        ):
            found.append(f"{where}: reads {node.slice.value} itself (use mori.core.env.setting)")
    return found


def py_env_names(text: str) -> set[str]:
    """MORI_*/UMBP_* names used as environment keys: mapping keys, keyword names, get/[] keys."""
    names = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.keyword) and node.arg and ENV_NAME.match(node.arg):
            names.add(node.arg)
        elif isinstance(node, ast.Dict):
            names |= {
                k.value
                for k in node.keys
                if isinstance(k, ast.Constant) and isinstance(k.value, str) and ENV_NAME.match(k.value)
            }
        elif (
            isinstance(node, ast.Subscript)
            and isinstance(node.slice, ast.Constant)
            and isinstance(node.slice.value, str)
            and ENV_NAME.match(node.slice.value)
        ):
            names.add(node.slice.value)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("get", "getenv", "setting", "pop")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
            and ENV_NAME.match(node.args[0].value)
        ):
            names.add(node.args[0].value)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "setting"
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            names.add(node.args[0].value)
    return names


def test_scanners_flag_what_they_must():
    """The checks below can fail: each pattern they exist for is flagged, and the allowed forms are not."""
    assert c_env_violations("io/src/x.cc", 'int n = atoi(getenv("MORI_IO_X"));')
    assert c_env_violations("io/src/x.cc", "const char* v = std::getenv(name);")
    assert c_env_violations("shmem/capi/setup.cc", 'setenv("MORI_SHMEM_HEAP_SIZE", s, 0);')
    assert c_env_violations("shmem/capi/launch_bootstrap.cc", 'std::getenv("MORI_RANK")')
    assert not c_env_violations("shmem/capi/launch_bootstrap.cc", "const char* v = std::getenv(name);")
    assert not c_env_violations("io/src/x.cc", '// getenv("MORI_X") in a comment\n/* setenv( */')
    assert py_env_violations("ep/x.py", 'import os\nv = os.environ.get("MORI_EP_X", "")')
    assert py_env_violations("ep/x.py", 'import os\nv = os.environ["UMBP_ROLE"]')
    assert py_env_violations("ep/x.py", 'import os\nv = os.getenv("MORI_X")')
    assert py_env_violations("core/x.py", 'import os\nos.environ.setdefault("MORI_PYTHON", "py")')
    assert py_env_violations("apps/x.py", 'import os\nos.environ["PATH"] = "/bin"')
    assert py_env_violations("apps/x.py", 'import os\nos.putenv("X", "1")')
    assert not py_env_violations("core/x.py", 'import os\nv = os.environ.get("MORI_RANK")')
    assert not py_env_violations(
        "apps/x.py", 'import os\nenv = dict(os.environ, MORI_PYTHON="p")\nenv["MORI_RANK"] = "1"'
    )
    assert not py_env_violations(
        "apps/x.py", 'import os\nenv = dict(os.environ)\nenv.setdefault("MORI_SHMEM_HEAP_SIZE", "1M")'
    )
    assert py_env_names('env = dict(os.environ, MORI_A="1")\nd = {"UMBP_B": 1}\nx = setting("MORI_C")') == {
        "MORI_A",
        "UMBP_B",
        "MORI_C",
    }


def test_only_the_table_reads_the_environment():
    found = []
    for p in _library_files(C_SUFFIXES):
        found += c_env_violations(_rel(p), p.read_text(errors="replace"))
    for p in _library_files({".py"}):
        found += py_env_violations(_rel(p), p.read_text())
    assert not found, "\n".join(found)


def test_every_environment_name_the_library_uses_is_a_row():
    rows = {r["name"] for r in env_table()}
    used: dict[str, str] = {}
    for p in _library_files({".py"}):
        for name in py_env_names(p.read_text()):
            used.setdefault(name, _rel(p))
    for p in sorted((ROOT / "shmem" / "bin").iterdir()):  # the shell tools: oshrun, oshcc, oshc++
        for name in re.findall(r"\$\{?((?:MORI|UMBP)_[A-Z0-9_]+)", p.read_text()):
            used.setdefault(name, _rel(p))
    missing = {n: f for n, f in used.items() if n not in rows}
    assert not missing, f"not rows of core/include/mori/core/env_defs.h: {missing}"


def test_rows_have_a_category_and_known_types():
    rows = env_table()
    assert len({r["name"] for r in rows}) == len(rows)
    layers = {
        "core",
        "bootstrap",
        "transports",
        "shmem",
        "collectives",
        "ep",
        "io",
        "umbp",
        "ir",
        "apps",
        "tools",
        "tests",
    }
    for r in rows:
        assert r["category"] in layers, r
        assert r["type"] in ("size", "seconds", "number", "bool", "int", "string"), r
        assert ENV_NAME.match(r["name"]) and r["description"], r
    heap = next(r for r in rows if r["name"] == "MORI_SHMEM_HEAP_SIZE")
    assert (heap["category"], heap["alias"]) == ("shmem", "SHMEM_SYMMETRIC_SIZE")


def test_setting_is_typed_by_the_table(monkeypatch):
    rng = random.Random()
    mib = rng.randrange(3, 5000)
    monkeypatch.setenv("MORI_SHMEM_GPU_HEAP_SIZE", f"{mib}MiB")
    assert setting("MORI_SHMEM_GPU_HEAP_SIZE") == mib << 20
    timeout = rng.randrange(1, 10**6) / 8
    monkeypatch.setenv("MORI_BOOTSTRAP_TIMEOUT", repr(timeout))
    assert setting("MORI_BOOTSTRAP_TIMEOUT") == timeout and isinstance(setting("MORI_BOOTSTRAP_TIMEOUT"), float)
    spins = rng.randrange(1, 2**40)
    monkeypatch.setenv("MORI_SPIN_ITERATIONS", str(spins))
    assert setting("MORI_SPIN_ITERATIONS") == spins
    flag = rng.choice([("yes", True), ("On", True), ("0", False), ("false", False)])
    monkeypatch.setenv("MORI_DISABLE_P2P", flag[0])
    assert setting("MORI_DISABLE_P2P") is flag[1]
    text = f"eth{rng.randrange(10**6)}"
    monkeypatch.setenv("MORI_SOCKET_IFNAME", text)
    assert setting("MORI_SOCKET_IFNAME") == text
    monkeypatch.delenv("MORI_SPIN_ITERATIONS")
    assert setting("MORI_SPIN_ITERATIONS") == 20000  # the table's default
    monkeypatch.setenv("MORI_SPIN_ITERATIONS", "many")
    with pytest.raises(InvalidArgument, match="MORI_SPIN_ITERATIONS"):
        setting("MORI_SPIN_ITERATIONS")
    with pytest.raises(ValueError, match="MORI_NO_SUCH_SETTING"):
        setting("MORI_NO_SUCH_SETTING")


def test_alias_gives_the_value_when_mori_name_is_unset(monkeypatch):
    mib = random.randrange(2, 4096)
    monkeypatch.delenv("MORI_SHMEM_HEAP_SIZE", raising=False)
    monkeypatch.setenv("SHMEM_SYMMETRIC_SIZE", f"{mib}M")
    assert setting("MORI_SHMEM_HEAP_SIZE") == mib << 20
    row = next(r for r in env_table() if r["name"] == "MORI_SHMEM_HEAP_SIZE")
    assert row["is_set"] and row["set_by_alias"] and row["value"] == f"{mib}M"
    monkeypatch.setenv("MORI_SHMEM_HEAP_SIZE", f"{mib + 1}M")  # MORI's own name wins
    assert setting("MORI_SHMEM_HEAP_SIZE") == (mib + 1) << 20
    row = next(r for r in env_table() if r["name"] == "MORI_SHMEM_HEAP_SIZE")
    assert row["is_set"] and not row["set_by_alias"]


def test_mori_info_env_shows_category_and_alias(monkeypatch):
    mib = random.randrange(2, 4096)
    env = {k: v for k, v in __import__("os").environ.items() if k != "MORI_SHMEM_HEAP_SIZE"}
    env["SHMEM_SYMMETRIC_SIZE"] = f"{mib}M"
    out = subprocess.run(
        [sys.executable, "-m", "mori.apps.cli", "info", "--env"], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    heap = next(i for i, l in enumerate(lines) if "MORI_SHMEM_HEAP_SIZE" in l)
    assert lines[heap].startswith("*") and f"{mib}M" in lines[heap], lines[heap]
    assert "alias SHMEM_SYMMETRIC_SIZE <-" in lines[heap], lines[heap]
    header = next(l for l in reversed(lines[:heap]) if l.startswith("["))
    assert header == "[shmem]"
    assert {l for l in lines if l.startswith("[")} >= {"[core]", "[shmem]", "[io]", "[umbp]", "[ep]"}
    assert len([l for l in lines if "MORI_" in l or "UMBP_" in l]) == len(_C.core.env_table())
