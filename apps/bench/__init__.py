# SPDX-License-Identifier: MIT
"""``mori bench WHAT``: every benchmark prints a table, writes JSON and runs its baseline in
the same run, so each figure is a ratio measured on the same machine."""
from __future__ import annotations

import importlib
import sys
from typing import Sequence

# name -> module under mori.apps.bench; `shmem` picks a variant from its flags.
_BENCHES = {
    "shmem": "shmem",
    "shmem-c": "shmem_c",
    "ep": "ep",
    "ccl": "ccl",
    "io": "io",
    "umbp": "umbp",
    "ir": "ir",
}


def main(argv: Sequence[str]) -> int:
    argv = list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: mori bench {" + ",".join(_BENCHES) + "} [options]\n"
              "  shmem            put/get latency and bandwidth between 2 PEs of one host (vs mpi4py RMA, memcpy)\n"
              "  shmem --hosts 2  the same across a network link (vs a plain TCP socket)\n"
              "  shmem --gpu      GPU heap RMA on 2 GPUs (vs torch peer copy)\n"
              "  shmem-c          the C API vs Open MPI's OpenSHMEM\n"
              "  ep               MoE dispatch/combine (vs the all_to_all path)\n"
              "  ccl              allgather and friends (vs gloo / NCCL)\n"
              "  io               MORI-IO point-to-point transfers (vs a TCP socket, memcpy, Mooncake, NIXL)\n"
              "  io --gpu         MORI-IO on GPU memory, CUDA IPC and tcp (vs a device-to-device copy)\n"
              "  ir               Triton kernels over MORI-IR: put, put+signal, all-reduce (vs CUDA C++, NCCL)\n"
              "  umbp             MORI-UMBP put/get, DRAM and SSD hits, local and per-host server (vs memcpy, pread, Mooncake Store)\n"
              "  umbp --master    the UMBP master's BatchRouteGet rate: in-memory store, one Redis, four Redis")
        return 0
    what, rest = argv[0], argv[1:]
    module = _BENCHES.get(what)
    if what == "shmem" and "--hosts" in rest:
        module = "shmem_hosts"
    elif what == "shmem" and "--gpu" in rest:
        module = "shmem_gpu"
        rest = [a for a in rest if a != "--gpu"]
    elif what == "umbp" and "--master" in rest:
        module = "umbp_master"
        rest = [a for a in rest if a != "--master"]
    elif what == "io" and "--gpu" in rest:
        module = "io_gpu"
        rest = [a for a in rest if a != "--gpu"]
    if module is None:
        print(f"mori bench: unknown benchmark {what!r}; choose from {', '.join(_BENCHES)}", file=sys.stderr)
        return 2
    try:
        mod = importlib.import_module(f"mori.apps.bench.{module}")
    except ModuleNotFoundError as exc:
        print(f"mori bench {what}: not available in this build ({exc})", file=sys.stderr)
        return 2
    return mod.main(rest)
