# SPDX-License-Identifier: MIT
"""Shared by the ucx tests: whether UCX can run here, and the settings that force it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def ucx_library() -> dict:
    """What MORI's loader finds (in a fresh interpreter: it loads once per process)."""
    probe = "import json, mori.transports as t; print(json.dumps(t.ucx_library()))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def ucx_or_skip() -> dict:
    lib = ucx_library()
    if not lib["available"]:
        pytest.skip(f"UCX unavailable: {lib['why']} (Debian: apt-get install libucx0 libucx-dev)")
    return lib


def ucx_all(tls: str) -> dict:
    """Every pair of distinct PEs over ucx on UCX's `tls` transports."""
    return {"MORI_NET_TRANSPORT": "ucx-all", "UCX_TLS": tls}
