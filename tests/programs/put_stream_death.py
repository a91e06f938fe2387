# SPDX-License-Identifier: MIT
"""A PE killed while every PE streams puts at every other (issue 29, item 2): the reproduction
of a survivor aborting inside UCX 1.13's software RMA (MORI_NET_TRANSPORT=ucx UCX_TLS=tcp,
2 hosts x 2 PEs, victim 3; one run in 12-24 aborted until such RMA became MORI's requests over
active messages: see docs/transports.md).

    python put_stream_death.py VICTIM [exit|finalize|os_exit|now]

Each PE streams non-blocking 256 KiB puts at every other PE, a quiet every few rounds, no
barrier; once the stream runs, PE VICTIM SIGKILLs itself in the middle of it. A survivor must
get an error naming the victim (never an abort inside the transport); it prints
``PE <me> caught <Type> after <s> s: <message>`` and exits with code 3.
"""

from __future__ import annotations

import os
import signal
import sys
import time

import numpy as np

import mori.shmem as sh

CHUNK = 32 * 1024  # int64s: 256 KiB a put


def main(victim: int, how: str) -> int:
    sh.init()
    me, n = sh.my_pe(), sh.n_pes()
    inbox = sh.zeros((n, CHUNK), np.int64)
    out = np.arange(CHUNK, dtype=np.int64) + me
    sh.barrier_all()
    start = last_ok = time.monotonic()
    try:
        for it in range(1_000_000):
            for k in range(1, n):
                sh.put(inbox[me], out, pe=(me + k) % n, nbi=True)
            if it % 4 == 3:
                sh.quiet()
                last_ok = time.monotonic()
            if me == victim and time.monotonic() - start > 0.5:
                os.kill(os.getpid(), signal.SIGKILL)
            if time.monotonic() - start > 60:
                break
    except Exception as exc:  # noqa: BLE001 - the point is which error arrives
        print(f"PE {me} caught {type(exc).__name__} after {time.monotonic() - last_ok:.2f} s: {exc}", flush=True)
        # Stay a moment: the other survivors must see the victim's death first, not this exit.
        if how != "now":  # "now": leave at once, as a program that does not expect this would
            time.sleep(1.5)
        if how == "finalize":
            sh.finalize()
        if how == "os_exit":
            os._exit(3)
        return 3  # a normal exit: the runtime is torn down with the process
    print(f"PE {me}: the stream ended without an error", flush=True)
    return 1


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else "exit"))
