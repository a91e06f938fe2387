# SPDX-License-Identifier: MIT
"""Launch multi-process jobs from pytest: `mori run`, `mpirun`, or torch.multiprocessing.

Every launch has a timeout: a hang fails the test instead of stalling CI.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Optional, Sequence

PROGRAMS = Path(__file__).parent / "programs"
CAPI_PROGRAMS = Path(__file__).parent / "capi"

# Open MPI as root, oversubscribed on a 2-core machine (reference/environment.md).
MPI_ENV = {
    "OMPI_ALLOW_RUN_AS_ROOT": "1",
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    "OMPI_MCA_rmaps_base_oversubscribe": "1",
    "OMPI_MCA_opal_common_ucx_opal_mem_hooks": "0",
}


def job_env(extra: Optional[dict] = None) -> dict:
    env = dict(os.environ)
    env.update(MPI_ENV)
    env.setdefault("MORI_SHMEM_HEAP_SIZE", "256M")
    env.setdefault("MORI_BOOTSTRAP_TIMEOUT", "60")
    env["PYTHONUNBUFFERED"] = "1"
    if extra:
        env.update(extra)
    return env


def _run(cmd: Sequence[str], timeout: float, env: Optional[dict]) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(list(cmd), env=job_env(env), stdin=subprocess.DEVNULL, capture_output=True,
                              text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"").decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        err = (exc.stderr or b"").decode(errors="replace") if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        raise AssertionError(f"job timed out after {timeout}s (a hang): {' '.join(cmd)}\n--- stdout\n{out}\n"
                             f"--- stderr\n{err}") from None


def mori_run(n: int, program: Sequence[str], timeout: float = 120, env: Optional[dict] = None,
             launcher_args: Sequence[str] = ()) -> subprocess.CompletedProcess:
    """`mori run -n N program...`"""
    cmd = [sys.executable, "-m", "mori.apps.cli", "run", "-n", str(n), *launcher_args, "--", *program]
    return _run(cmd, timeout, env)


def mpirun(n: int, program: Sequence[str], timeout: float = 120, env: Optional[dict] = None) -> subprocess.CompletedProcess:
    """`mpirun -n N program...` (Open MPI)."""
    exe = shutil.which("mpirun")
    if exe is None:
        import pytest

        pytest.skip("mpirun is not installed (scripts/setup-ci.sh installs Open MPI)")
    return _run([exe, "-n", str(n), *program], timeout, env)


def gpu_pe_counts(device_count: int) -> list[int]:
    """PE counts of a multi-GPU test: 2, and every GPU of the machine when it has more; none (skip)
    with fewer than 2 GPUs. MORI_TEST_GPU_PES="2,8" names the counts instead, and then PEs may
    share GPUs (their kernels take turns on a shared GPU: a check of correctness, never of speed;
    EP8 and CCL8 protocols can so be tested on one GPU)."""
    named = os.environ.get("MORI_TEST_GPU_PES", "").strip()
    if named and device_count >= 1:
        return sorted({int(v) for v in named.split(",") if v.strip()})
    return sorted({2, device_count}) if device_count >= 2 else []


def python_program(name: str, *args: str) -> list[str]:
    return [sys.executable, str(PROGRAMS / name), *map(str, args)]


def check(proc: subprocess.CompletedProcess, expect_ok: bool = True) -> str:
    """Assert on the exit code; returns stdout+stderr for further checks."""
    text = proc.stdout + proc.stderr
    if expect_ok:
        assert proc.returncode == 0, f"job failed with code {proc.returncode}:\n{text[-6000:]}"
    return text


def build_capi_programs(names: Sequence[str], out: Path) -> Path:
    """Compiles tests/capi/NAME.c with our oshcc into `out` (warnings are errors); returns `out`."""
    from mori.shmem.capi import paths

    oshcc = str(paths().bin_dir / "oshcc")
    for name in names:
        opt = "-O0" if name == "generics_gen" else "-O1"  # 1400 generated cases: -O0 compiles 4x faster
        cmd = [oshcc, "-std=c11", opt, "-Wall", "-Werror", "-pthread", "-o", str(out / name),
               str(CAPI_PROGRAMS / f"{name}.c"), "-lm"]
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, f"{' '.join(cmd)}\n{res.stderr}"
    return out
