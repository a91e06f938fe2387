# SPDX-License-Identifier: MIT
"""The first PE lost is the one named (issue 29 item 10). Two hosts of two PEs (0, 1 | 2, 3):
PEs 1 and 3 stream puts at each other, PEs 0 and 2 wait for a word nobody writes. PE 3 SIGKILLs
itself; PE 1 fails on that and leaves at once, as a program that does not expect it would. PE 0
sees PE 1 (its host) leave, perhaps before its own transport notices PE 3: it must still name
PE 3 first. Every survivor prints ``PE <me> caught <Type>: <message>``.
"""

from __future__ import annotations

import os
import signal
import time

import numpy as np

import mori.shmem as sh

sh.init()
me, n = sh.my_pe(), sh.n_pes()
inbox = sh.zeros(1 << 14, np.int64)
flag = sh.zeros(1, np.int64)
data = np.arange(1 << 14, dtype=np.int64) + me
sh.barrier_all()
start = time.monotonic()
try:
    if me in (1, 3):
        while time.monotonic() - start < 60:
            sh.put(inbox, data, pe=4 - me, nbi=True)
            sh.quiet()
            if me == 3 and time.monotonic() - start > 0.5:
                os.kill(os.getpid(), signal.SIGKILL)
    else:
        sh.wait_until(flag, "==", 1)
    print(f"PE {me}: no error", flush=True)
except Exception as exc:  # noqa: BLE001 - which error arrives is the point
    print(f"PE {me} caught {type(exc).__name__}: {exc}", flush=True)
    if me != 1:
        time.sleep(1.0)
os._exit(3)
