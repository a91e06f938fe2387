# SPDX-License-Identifier: MIT
"""A PE that dies, stops or leaves early, and survivors that must get an error, not a hang.

Usage: peer_death.py VICTIM MODE (launched by any launcher, or with PEER_DEATH_UID_FILE/RANK/SIZE
holding a unique id and this PE's place). Modes:
  put, get, put_other, atomic: the victim dies (exits) while the others stream puts/gets/quiets
      (to it, or with put_other to a live PE); on one host these never touch the victim's process.
  skip_barrier: the victim skips a barrier and finalizes; the others' next barrier must fail.
  stop: the victim stops (SIGSTOP); with MORI_SHMEM_WAIT_TIMEOUT the others' barrier times out.
  wait_until: the victim lives but never writes; the others' wait_until times out (MORI_SHMEM_WAIT_TIMEOUT).
Every survivor prints "PE <me> caught after <s>s: <error>" and exits 0; no error exits 1."""

from __future__ import annotations

import os
import signal
import sys
import time

import numpy as np

import mori.shmem as sh

victim = int(sys.argv[1])
mode = sys.argv[2]
LIMIT_S = 60.0  # a survivor that sees nothing for this long reports "no error"

uid_file = os.environ.get("PEER_DEATH_UID_FILE")  # launched by hand with a unique id
if uid_file:
    with open(uid_file, "rb") as f:
        sh.shmem_init_attr(
            sh.MORI_SHMEM_INIT_WITH_UNIQUEID,
            int(os.environ["PEER_DEATH_RANK"]),
            int(os.environ["PEER_DEATH_SIZE"]),
            f.read(),
        )
else:
    sh.init()
me, n = sh.my_pe(), sh.n_pes()
data = sh.zeros(1024, np.int64)
pids = sh.zeros(n, np.int64)
for pe in range(n):
    sh.p(pids, os.getpid(), pe, index=me)
sh.barrier_all()


def survive(action) -> None:
    start = time.monotonic()
    try:
        while time.monotonic() - start < LIMIT_S:
            action()
    except (RuntimeError, TimeoutError) as exc:
        print(f"PE {me} caught after {time.monotonic() - start:.1f}s: {type(exc).__name__}: {exc}", flush=True)
        if mode == "stop" and me == (victim + 1) % n:
            os.kill(int(pids[victim]), signal.SIGCONT)  # let the victim go home
        os._exit(0)
    print(f"PE {me}: no error after {LIMIT_S}s")
    os._exit(1)


payload = np.random.default_rng().integers(1, 1 << 60, 1024)
other = next((pe for pe in range(n) if pe not in (me, victim)), me)
if me == victim:
    if mode == "wait_until":
        time.sleep(5)  # alive, never writes
        os._exit(0)
    if mode == "skip_barrier":
        try:  # its finalize barrier pairs with the others' first barrier
            sh.finalize()
        except RuntimeError as exc:  # its bootstrap goodbye fails once the others have left
            print(f"PE {me} (the victim) finalize: {exc}")
        time.sleep(5)  # finalized but still running: not a death, yet it will never arrive
        os._exit(0)
    if mode == "stop":
        os.kill(os.getpid(), signal.SIGSTOP)
        os._exit(0)
    time.sleep(0.3)  # the others are streaming by now
    os._exit(0)  # gone without finalize (an exit code of 0 keeps launchers from stopping the others)
elif mode == "wait_until":
    survive(lambda: sh.wait_until(data, sh.CMP_EQ, 7, index=3))
elif mode == "skip_barrier":
    sh.barrier_all()
    survive(sh.barrier_all)
elif mode == "stop":
    survive(sh.barrier_all)
elif mode == "put":
    survive(lambda: (sh.put(data, payload, victim), sh.quiet()))
elif mode == "get":
    survive(lambda: sh.get(payload, data, victim))
elif mode == "put_other":
    survive(lambda: (sh.put(data, payload, other), sh.quiet()))
elif mode == "atomic":
    survive(lambda: sh.atomic_add(data, 1, victim))
else:
    raise SystemExit(f"unknown mode {mode}")
