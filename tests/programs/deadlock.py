# SPDX-License-Identifier: MIT
"""A job that deadlocks (issue 29 item 9): PE 1 waits for a word nobody writes while the others
sit in a barrier. Before that, a slow PE (busy, not in a wait) for 4.5 s must not be taken for a
deadlock.

Usage: mori run -n 3 deadlock.py (never ends by itself with the default MORI_SHMEM_WAIT_TIMEOUT).
"""

from __future__ import annotations

import time

import numpy as np

import mori.shmem as sh

sh.init()
me = sh.my_pe()
flag = sh.zeros(1, np.int64)
sh.barrier_all()
if me == 1:
    time.sleep(4.5)  # slow, not blocked: the others' barrier must not be reported
sh.barrier_all()
print(f"PE {me} phase 2", flush=True)
if me == 1:
    sh.wait_until(flag, "==", 1)  # nobody ever writes it
else:
    sh.barrier_all()
