# SPDX-License-Identifier: MIT
"""MORI-UMBP's local store from several threads at once: tests/umbp/native/umbp_thread_stress.cc
built against the installed libmori and run (scripts/tsan.sh runs the same program under
ThreadSanitizer)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from harness import build_native_program

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "tests" / "umbp" / "native" / "umbp_thread_stress.cc"


@pytest.fixture(scope="module")
def stress_exe(tmp_path_factory) -> Path:
    # umbp/ itself too: the server mode starts the per-host server from its internal header.
    includes = [ROOT / "umbp" / "include", ROOT / "core" / "include", ROOT / "umbp"]
    return build_native_program(SOURCE, tmp_path_factory.mktemp("stress") / "umbp_thread_stress", includes)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("mode", ["local", "server"])
def test_threads_put_and_get_over_a_dram_tier_that_keeps_evicting_to_the_ssd(
    stress_exe: Path, tmp_path, mode: str
) -> None:
    # 4 s of 4 threads: fresh keys of 1-192 KiB put singly and in batches, gets of one's own and
    # the others' keys (each checked against the bytes its key determines), exists, flushes; in
    # the store itself, or through two clients of a per-host server holding it.
    argv = [str(stress_exe), str(tmp_path), "4", "4", mode]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=150)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.rstrip().endswith("ok"), proc.stdout
    fields = proc.stdout.split(" gets checked")[0].split()
    assert int(fields[-1]) >= 100, proc.stdout  # it ran, and read values back
    from_ssd = int(proc.stdout.split(" from the SSD")[0].rsplit(" ", 1)[1])
    assert from_ssd > 0, proc.stdout  # the SSD tier served some of them


def test_bad_arguments_are_refused(stress_exe: Path, tmp_path) -> None:
    for argv in ([], [str(tmp_path), "0"], [str(tmp_path), "1", "0"], [str(tmp_path), "1", "1", "remote"]):
        proc = subprocess.run([str(stress_exe), *argv], capture_output=True, text=True, timeout=30)
        assert proc.returncode == 2 and "usage" in proc.stderr, argv
