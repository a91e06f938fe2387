# SPDX-License-Identifier: MIT
"""GPU symmetric heap, cuda transport and device API: 2 processes on 2 GPUs (`mori run -n 2`).

Skips without CUDA support in this build or with fewer than 2 visible GPUs. Each check of
tests/programs/gpu_suite.py runs in its own 2-PE job, so one failure cannot hide another.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from harness import check, gpu_pe_counts, mori_run, python_program
from mori import _C

_NO_CUDA = not _C.shmem.built_with_cuda()
needs_gpus = [
    pytest.mark.gpu,
    pytest.mark.skipif(_NO_CUDA, reason="MORI was built without CUDA"),
    pytest.mark.skipif(
        not _NO_CUDA and not gpu_pe_counts(_C.shmem.cuda_device_count()),
        reason="needs 2 CUDA GPUs (or MORI_TEST_GPU_PES and one)",
    ),
]


def _gpu(fn):
    for mark in needs_gpus:
        fn = mark(fn)
    return fn


CHECKS = [
    "host_rma",
    "stream_rma",
    "device_put_get",
    "atomics",
    "signal_ordering",
    "barrier_on_stream",
    "graph",
    "ptr_p2p",
]
# NVLink multicast stays off on shared GPU hosts; the heap sizes keep start-up quick.
GPU_ENV = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
    "MORI_SHMEM_GPU_HEAP_SIZE": "512M",
    "MORI_SHMEM_HEAP_SIZE": "256M",
    "MORI_BOOTSTRAP_TIMEOUT": "60",
}


@_gpu
@pytest.mark.parametrize("name", CHECKS)
def test_gpu_check(name: str) -> None:
    out = check(mori_run(2, python_program("gpu_suite.py", name), timeout=120, env=GPU_ENV))
    assert f"PASS {name}" in out, f"check {name} did not pass:\n{out[-6000:]}"


@_gpu
def test_disable_p2p_gives_null_peer_pointers() -> None:
    env = dict(GPU_ENV, MORI_DISABLE_P2P="1")
    out = check(mori_run(2, python_program("gpu_suite.py", "disable_p2p"), timeout=120, env=env))
    if "SKIP disable_p2p" in out:
        pytest.skip(
            "MORI_DISABLE_P2P=1 needs a non-shared-memory host transport (tcp) for the host heap: "
            + out.split("SKIP disable_p2p:", 1)[1].strip().splitlines()[0]
        )
    assert "PASS disable_p2p" in out, out[-4000:]


def test_multicast_stays_off() -> None:
    """Guard for the shared GPU hosts: nothing in MORI may create NVLink multicast objects."""
    root = os.path.join(os.path.dirname(__file__), "..", "..")
    for folder in ("transports", "shmem"):
        for dirpath, _, files in os.walk(os.path.join(root, folder)):
            for f in files:
                if f.endswith((".cc", ".cu", ".cuh", ".h", ".py")):
                    with open(os.path.join(dirpath, f), encoding="utf-8") as fh:
                        assert "cuMulticastCreate" not in fh.read(), f"{f} uses NVLink multicast"


def _run_python(code: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


def test_unbound_pe_refuses_gpu_calls_clearly() -> None:
    """Without a GPU binding, MORI's GPU calls fail with Unavailable naming the fix (runs everywhere)."""
    code = (
        "import mori.shmem as sh\n"
        "from mori.shmem import gpu\n"
        "sh.shmem_init()\n"
        "assert not gpu.is_bound() and gpu.device() == -1\n"
        "sh.shmem_barrier_on_stream()  # a host barrier on a CPU PE (MORI's meaning there)\n"
        "for call in (lambda: gpu.putmem_on_stream(0, 0, 8, 0), gpu.device_state_ptr):\n"
        "    try:\n"
        "        call()\n"
        "        raise SystemExit('a GPU call succeeded on an unbound PE')\n"
        "    except NotImplementedError as exc:\n"
        "        assert 'not bound to a GPU' in str(exc), exc\n"
        "addr = sh.shmem_malloc(64)\n"
        "assert addr and not gpu.contains(addr)  # host heap when unbound\n"
        "sh.shmem_free(addr)\n"
        "sh.shmem_finalize()\n"
        "print('ok')\n"
    )
    proc = _run_python(code, {"MORI_DEVICE": "-1"})
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stdout + proc.stderr


def test_missing_device_is_an_error() -> None:
    """MORI_DEVICE naming a device this process cannot see fails init with a clear message."""
    count = _C.shmem.cuda_device_count()
    proc = _run_python("import mori.shmem as sh\nsh.shmem_init()\n", {"MORI_DEVICE": str(count + 3)})
    assert proc.returncode != 0
    expected = "does not exist" if _C.shmem.built_with_cuda() else "built without CUDA"
    assert expected in proc.stderr, proc.stderr[-2000:]
