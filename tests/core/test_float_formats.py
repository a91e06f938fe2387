# SPDX-License-Identifier: MIT
"""The one set of narrow-float conversions (core/include/mori/core/float_formats.h) against the
two it replaced (issue 30 item 4), bit for bit: float_formats_check.cc decodes every 16-bit,
fp8 and fp4 pattern and encodes ~2 M fp32 patterns placed on, around and between every rounding
boundary, NaN payloads included (tests/ep's test_encode_matches_torch compares the same encoders,
reached through mori._C, with torch's casts)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path


REPO = Path(__file__).resolve().parents[2]


def test_every_pattern_matches_both_old_implementations(tmp_path: Path) -> None:
    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    assert cxx, "a C++ compiler is needed (the build has one)"
    exe = tmp_path / "float_formats_check"
    build = subprocess.run(
        [
            cxx,
            "-std=c++20",
            "-O2",
            "-Wall",
            "-Wextra",
            "-Werror",
            f"-I{REPO / 'core/include'}",
            "-o",
            str(exe),
            str(REPO / "tests/core/float_formats_check.cc"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert build.returncode == 0, build.stderr
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["ok"] is True
    # 65536 16-bit patterns x (f16, bf16) x 2 old copies, 256 fp8 x 2 formats, 16 fp4.
    assert result["decoded"] == 65536 * 4 + 256 * 2 + 16
    assert result["encoded"] >= 65536 * 32
