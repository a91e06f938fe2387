# SPDX-License-Identifier: MIT
"""PE of a job killed inside shmem init, right after its heap exists (SIGKILL: no cleanup runs).

Usage: die_in_init.py RANK SIZE RENDEZVOUS_DIR. A file-based Python bootstrap makes the moment
exact: at its first allgather after the heap is mapped, the PE prints the heap's mapping(s) from
/proc/self/maps and kills itself."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

from mori import _C


class FileBootstrap:
    """allgather through files in a shared directory (one file per rank and call)."""

    name = "files"

    def __init__(self, rank: int, size: int, where: Path) -> None:
        self.rank, self.size, self.where, self.calls = rank, size, where, 0

    def allgather(self, data: bytes) -> bytes:
        heap = [line.split(None, 5)[-1].strip() for line in open("/proc/self/maps") if "mori-" in line]
        if heap:
            print("heap mapped at:", *sorted(set(heap)), sep="\n", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        self.calls += 1
        tmp = self.where / f".{self.calls}-{self.rank}"
        tmp.write_bytes(data)
        tmp.rename(self.where / f"{self.calls}-{self.rank}")
        parts = []
        for r in range(self.size):
            f = self.where / f"{self.calls}-{r}"
            while not f.exists():
                time.sleep(0.005)
            parts.append(f.read_bytes())
        return b"".join(parts)

    def barrier(self) -> None:
        self.allgather(b"")


rank, size, where = int(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
_C.shmem.init_python(FileBootstrap(rank, size, where))
print("init finished: the PE was not killed", flush=True)
sys.exit(1)
