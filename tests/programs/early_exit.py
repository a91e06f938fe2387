# SPDX-License-Identifier: MIT
"""PE `victim` leaves without finalizing; the others must get an error naming it, not hang."""

from __future__ import annotations

import os
import sys
import time

import numpy as np

import mori.shmem as sh

victim = int(sys.argv[1])
mode = sys.argv[2] if len(sys.argv) > 2 else "barrier"
sh.init()
me = sh.my_pe()
start = time.monotonic()
try:
    # The allocation ends in a barrier that the victim may leave (and exit) before the others
    # do: an error there names it too.
    flag = sh.zeros(1, np.int64)
    if me == victim:
        os._exit(0)  # gone: no finalize, no goodbye
    if mode == "barrier":
        sh.barrier_all()
    elif mode == "all_gather":  # a host collective of mori.ccl
        import torch

        import mori.ccl as ccl

        x = torch.full((1000,), float(me))
        ccl.all_gather_into_tensor(torch.empty(1000 * sh.n_pes()), x)
    else:
        sh.wait_until(flag, sh.CMP_EQ, 1)  # the victim would have set it
    print(f"PE {me}: no error")
    sys.exit(1)
except RuntimeError as exc:
    print(f"PE {me} caught after {time.monotonic() - start:.1f}s: {exc}")
    os._exit(0)
