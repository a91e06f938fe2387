# SPDX-License-Identifier: MIT
"""Launch-self: a benchmark's front end starts its own ranks, each running the same module with
the same command line plus one worker flag, so a rank parses exactly what the user typed (no
option is re-spelled by hand and none can be forgotten on the way)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from typing import Optional, Sequence

# GPU ranks: NVLink multicast off (NCCL's NVLS, torch's and NVSHMEM's multicast objects), as
# docs/gpu.md asks on shared GPU hosts.
GPU_JOB_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}

# Open MPI's mpirun as root and with more ranks than cores (the CI machine has 2).
OMPI_ENV = {
    "OMPI_ALLOW_RUN_AS_ROOT": "1",
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    "OMPI_MCA_rmaps_base_oversubscribe": "1",
}


def worker_command(module: str, argv: Sequence[str], worker_flag: str = "--worker") -> list[str]:
    """``python -m module worker_flag argv...``: what every rank runs."""
    return [sys.executable, "-m", module, worker_flag, *argv]


def relaunch(
    module: str,
    argv: Sequence[str],
    nproc: int,
    *,
    worker_flag: str = "--worker",
    env: Optional[dict] = None,
    prefix_output: bool = False,
) -> int:
    """Run ``nproc`` ranks of ``module`` with ``mori run`` on this host, each given ``argv``
    untouched after ``worker_flag``; returns the job's exit status. ``env`` (default: this
    process's) is the ranks' environment."""
    cmd = [
        sys.executable,
        "-m",
        "mori.apps.cli",
        "run",
        "-n",
        str(nproc),
        *([] if prefix_output else ["--no-prefix"]),
        "--",
        *worker_command(module, argv, worker_flag),
    ]
    return subprocess.call(cmd, env=env, stdin=subprocess.DEVNULL)


def mpirun_path() -> Optional[str]:
    """Open MPI's ``mpirun`` when it is on the PATH (the mpi4py baselines need it), else None."""
    return shutil.which("mpirun")


def relaunch_mpirun(module: str, argv: Sequence[str], nproc: int, *, worker_flag: str = "--worker") -> int:
    """As ``relaunch``, under ``mpirun`` (for baselines that need MPI itself)."""
    mpirun = mpirun_path()
    if mpirun is None:
        raise FileNotFoundError("mpirun is not on the PATH")
    env = dict(os.environ, **OMPI_ENV)
    return subprocess.call(
        [mpirun, "-n", str(nproc), *worker_command(module, argv, worker_flag)], env=env, stdin=subprocess.DEVNULL
    )


def use_local_gpu() -> int:
    """Make this rank's GPU current: its local rank (``mori run``/torchrun's ``LOCAL_RANK``),
    modulo the GPUs, so ranks share GPUs when there are fewer GPUs than ranks. Returns it."""
    import torch

    device = int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count()
    torch.cuda.set_device(device)
    return device
