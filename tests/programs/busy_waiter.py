# SPDX-License-Identifier: MIT
"""A wait whose PE other peers keep busy still times out (MORI_SHMEM_WAIT_TIMEOUT).

    MORI_SHMEM_WAIT_TIMEOUT=2 mori run -n 2 busy_waiter.py

PE 1 waits for a word that nobody writes, while PE 0 puts to PE 1 without pause for STREAM_S
seconds (2 PEs, so that each has a core and PE 1's wait keeps polling while served). A wait
that polls its transport while served must still run its checks: PE 1 must report the
timeout long before PE 0 stops.
"""

from __future__ import annotations

import time

import numpy as np

import mori.shmem as sh

STREAM_S = 15.0
REPORT_BY_S = 8.0


def main() -> None:
    sh.init()
    me = sh.my_pe()
    assert sh.n_pes() == 2, "run on 2 PEs"
    flag = sh.zeros(1, np.int64)
    box = sh.zeros(8, np.int64)
    sh.barrier_all()
    if me == 0:
        one = np.ones(8, np.int64)
        end = time.monotonic() + STREAM_S
        while time.monotonic() < end:
            sh.put(box, one, pe=1)
            sh.quiet()
    else:
        t = time.monotonic()
        try:
            sh.wait_until(flag, sh.CMP_EQ, 1)
        except Exception as e:  # the timeout: the job ends here
            waited = time.monotonic() - t
            print(f"busy waiter timed out after {waited:.1f} s: {e}", flush=True)
            assert waited < REPORT_BY_S, f"the timeout came only after {waited:.1f} s"
            raise SystemExit(3)
        raise AssertionError("the wait returned, but nobody wrote the flag")


if __name__ == "__main__":
    main()
