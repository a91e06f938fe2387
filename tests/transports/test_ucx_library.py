# SPDX-License-Identifier: MIT
"""The UCX loader: libucp is dlopen'ed at run time, never linked; which file and
version it found, or why none, is reported."""

from __future__ import annotations

import ctypes.util
import json
import os
import subprocess
import sys

import pytest

# Each check runs in a fresh interpreter: the loader loads once per process.
PROBE = "import json, mori.transports as t; print(json.dumps(t.ucx_library()))"


def probe(**env: str) -> dict:
    e = dict(os.environ)
    e.update(env)
    out = subprocess.run([sys.executable, "-c", PROBE], env=e, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def system_ucx_version() -> str:
    """The version of the libucp the dynamic linker finds, from ucx_info (same package)."""
    try:
        text = subprocess.run(["ucx_info", "-v"], capture_output=True, text=True, timeout=30).stdout
    except FileNotFoundError:
        return ""
    for line in text.splitlines():
        if line.startswith("# Version"):
            return line.split()[-1]
    return ""


needs_ucx = pytest.mark.skipif(
    ctypes.util.find_library("ucp") is None,
    reason="no libucp on this machine (Debian: apt-get install libucx0 libucx-dev)",
)


@needs_ucx
def test_loads_the_system_ucx_and_reports_version_and_path():
    r = probe(MORI_UCX_LIBRARY="")
    assert r["available"], r["why"]
    assert r["why"] == ""
    want = system_ucx_version()
    assert want, "ucx_info -v printed no version"
    assert r["version"] == want
    assert os.path.basename(r["path"]).startswith("libucp.so"), r
    assert os.path.isabs(r["path"]) and os.path.exists(r["path"]), r


@needs_ucx
def test_explicit_library_path_is_used():
    first = probe(MORI_UCX_LIBRARY="")
    real = os.path.realpath(first["path"])
    r = probe(MORI_UCX_LIBRARY=real)
    assert r["available"], r["why"]
    assert os.path.realpath(r["path"]) == real
    assert r["version"] == first["version"]


def test_missing_library_is_unavailable_naming_the_path(tmp_path):
    missing = str(tmp_path / "nonexistent-libucp.so")
    r = probe(MORI_UCX_LIBRARY=missing)
    assert r == {"available": False, "version": "", "path": "", "why": r["why"]}
    assert missing in r["why"] and "MORI_UCX_LIBRARY" in r["why"], r["why"]


def test_a_library_without_ucp_symbols_names_the_missing_symbol():
    libc = ctypes.util.find_library("c")
    r = probe(MORI_UCX_LIBRARY=libc)
    assert not r["available"]
    assert "symbol ucp_" in r["why"] and "missing" in r["why"], r["why"]
