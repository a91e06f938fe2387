# SPDX-License-Identifier: MIT
"""Faults under load: every PE loops on puts and barriers until something breaks.

    python tcp_faults.py kill VICTIM [PROGRESS_FILE]   # PE VICTIM SIGKILLs itself mid-run
    python tcp_faults.py loop PROGRESS_FILE            # run until the test breaks the network

A surviving PE must get an error (never hang); it prints
``PE <me> caught <Type> after <s> s: <message>`` and exits with code 3.
PE 0 creates PROGRESS_FILE once the loop is well under way.
"""

from __future__ import annotations

import os
import signal
import sys
import time

import numpy as np

import mori.shmem as sh


def main(mode: str, arg: str, progress: str) -> int:
    sh.init()
    me, n = sh.my_pe(), sh.n_pes()
    victim = int(arg) if mode == "kill" else -1
    if mode == "loop":
        progress = arg
    # Double-buffered: a PE may run one iteration ahead of its neighbour after a barrier.
    bufs = sh.zeros((2, 4096), np.int64)
    last_ok = time.monotonic()
    try:
        for it in range(1_000_000):
            buf = bufs[it % 2]
            sh.put(buf, np.full(4096, it * n + me, np.int64), pe=(me + 1) % n)
            sh.barrier_all()
            expect = it * n + (me - 1) % n
            if buf[0] != expect or buf[-1] != expect:
                print(f"PE {me}: wrong data in iteration {it}: {buf[0]} != {expect}", flush=True)
                return 1
            last_ok = time.monotonic()
            if it == 20 and me == 0 and progress:
                open(progress, "w").close()
            if it == 30 and me == victim:
                os.kill(os.getpid(), signal.SIGKILL)
    except Exception as exc:  # noqa: BLE001 - the point is which error arrives
        print(f"PE {me} caught {type(exc).__name__} after {time.monotonic() - last_ok:.2f} s: {exc}", flush=True)
        # Stay a moment before leaving: the other survivors must see the victim's death, not
        # this PE's exit, first (the tests check that each error names the PE that died).
        time.sleep(1.0)
        os._exit(3)  # the job is broken: leave without finalize
    print(f"PE {me}: the loop ended without an error", flush=True)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else ""))
