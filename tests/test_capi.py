# SPDX-License-Identifier: MIT
"""The OpenSHMEM C API: C programs in tests/capi/ built with our oshcc and run on 1-4 PEs
through oshrun, `mori run` and mpirun. Each program checks exact values on data drawn
from a seed chosen here (printed on failure) and exits non-zero on the first mismatch."""
from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness import check, job_env, mori_run, mpirun

CAPI = Path(__file__).parent / "capi"
PROGRAMS = ["rma", "amo", "sync", "coll", "legacy", "threads", "errors"]


@pytest.fixture(scope="module")
def tools() -> dict:
    from mori.shmem.capi import paths

    p = paths()
    return {"oshcc": str(p.bin_dir / "oshcc"), "oshcxx": str(p.bin_dir / "oshc++"), "oshrun": str(p.bin_dir / "oshrun"),
            "include": p.include_dir}


@pytest.fixture(scope="module")
def built(tools, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("capi")
    for name in PROGRAMS:
        cmd = [tools["oshcc"], "-std=c11", "-O1", "-Wall", "-Werror", "-pthread", "-o", str(out / name), str(CAPI / f"{name}.c"), "-lm"]
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, f"{' '.join(cmd)}\n{res.stderr}"
    return out


def _seed() -> str:
    return str(random.getrandbits(48))


def _oshrun(tools: dict, n: int, prog: list[str], timeout: float = 90, env: dict | None = None):
    cmd = [tools["oshrun"], "-n", str(n), *prog]
    extra = {"MORI_PYTHON": sys.executable, **(env or {})}
    try:
        return subprocess.run(cmd, env=job_env(extra), stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"oshrun timed out after {timeout}s (a hang): {' '.join(cmd)}") from exc


@pytest.mark.parametrize("name", ["rma", "amo", "sync", "coll", "legacy", "threads"])
@pytest.mark.parametrize("n", [2, 4])
def test_program_oshrun(built, tools, name, n):
    seed = _seed()
    proc = _oshrun(tools, n, [str(built / name), seed])
    out = check(proc)
    assert f"{name}: OK on {n} PEs" in out, f"seed {seed}:\n{out[-3000:]}"


@pytest.mark.parametrize("name", ["coll", "rma"])
def test_odd_pe_counts(built, name):
    """3 PEs: strided teams with odd sizes, ring neighbours that are not mutual."""
    seed = _seed()
    out = check(mori_run(3, [str(built / name), seed], timeout=90))
    assert f"{name}: OK on 3 PEs" in out, f"seed {seed}"


def test_single_pe_without_launcher(built):
    """shmem_init with no launcher variables is a job of one PE."""
    env = {k: v for k, v in job_env().items() if not k.startswith(("MORI_STORE", "OMPI_COMM", "PMI", "MASTER_ADDR"))}
    proc = subprocess.run([str(built / "legacy"), _seed()], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "legacy: OK on 1 PEs" in proc.stdout, proc.stdout + proc.stderr


def test_mpirun_bootstrap(built):
    """Started by Open MPI's mpirun, shmem_init bootstraps over MPI (libmpi loaded at run time)."""
    if shutil.which("mpirun") is None:
        pytest.skip("mpirun is not installed")
    seed = _seed()
    out = check(mpirun(2, [str(built / "amo"), seed], timeout=90))
    assert "amo: OK on 2 PEs" in out, f"seed {seed}"


def test_global_exit_status_passes_through(built, tools):
    proc = _oshrun(tools, 3, [str(built / "errors"), "exit"])
    assert proc.returncode == 99, proc.stdout + proc.stderr


@pytest.mark.parametrize("case, fn", [("pe", "shmem_long_p"), ("addr", "shmem_long_put")])
def test_bad_input_ends_job_naming_the_call(built, tools, case, fn):
    proc = _oshrun(tools, 3, [str(built / "errors"), case], timeout=60)
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0, text
    assert f"shmem error on PE" in text and fn in text, text
    assert ("out of range" if case == "pe" else "not symmetric") in text, text


def test_exhausted_heap_returns_null(built, tools):
    proc = _oshrun(tools, 2, [str(built / "errors"), "oom"], env={"MORI_SHMEM_HEAP_SIZE": "32M"})
    out = check(proc)
    assert "oom: NULL as expected" in out and "shmem_malloc" in out


def test_symmetric_size_env(built, tools):
    """SHMEM_SYMMETRIC_SIZE sets the heap when MORI_SHMEM_HEAP_SIZE is not given."""
    env = job_env({"SHMEM_SYMMETRIC_SIZE": "8M"})
    env.pop("MORI_SHMEM_HEAP_SIZE", None)
    prog = CAPI / "heapsize.c"
    exe = built / "heapsize"
    res = subprocess.run([tools["oshcc"], "-o", str(exe), str(prog)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    proc = subprocess.run([str(exe)], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(8 << 20), proc.stdout


def test_cplusplus_and_showme(tools, tmp_path):
    src = tmp_path / "hello.cc"
    src.write_text('#include <shmem.h>\n#include <shmemx.h>\n#include <cstdio>\n'
                   'int main() { shmem_init(); long* p = static_cast<long*>(shmem_malloc(8)); *p = shmem_my_pe();\n'
                   '  shmem_barrier_all(); std::printf("cxx %ld %d\\n", shmem_long_g(p, 0), shmem_n_pes());\n'
                   '  shmem_free(p); shmem_finalize(); return 0; }\n')
    exe = tmp_path / "hello"
    res = subprocess.run([tools["oshcxx"], "-std=c++20", "-Wall", "-Werror", "-o", str(exe), str(src)],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    out = check(_oshrun(tools, 2, [str(exe)]))
    assert out.count("cxx 0 2") == 2, out
    show = subprocess.run([tools["oshcc"], "--showme"], capture_output=True, text=True, timeout=10).stdout
    assert "-lmori_shmem" in show and str(tools["include"]) in show


def test_generated_files_are_current():
    gen = Path(__file__).parents[1] / "shmem" / "codegen" / "gen_capi.py"
    res = subprocess.run([sys.executable, str(gen), "--check"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
