# SPDX-License-Identifier: MIT
"""MORI's single-process multi-thread mode (one thread per PE) is not supported: the second
thread's init must be a clear error at once, not a deadlock, and the first thread's init waits
without the GIL (the other threads of the process keep running). Thread A starts an init as PE 0 of
2 (it waits for a PE 1 that never comes, until MORI_BOOTSTRAP_TIMEOUT); thread B, while A is
inside, asks to be PE 1. Launch: MORI_BOOTSTRAP_TIMEOUT=5 python ep_threads_as_pes.py
"""

from __future__ import annotations

import sys
import threading
import time

import mori.shmem as sh
from mori.shmem import api


def main() -> int:
    uid = sh.shmem_get_unique_id()
    outcome: dict = {}

    def pe(r: int) -> None:
        try:
            outcome[r] = sh.shmem_init_attr(sh.MORI_SHMEM_INIT_WITH_UNIQUEID, r, 2, uid)
        except Exception as exc:  # noqa: BLE001 (reported below)
            outcome[r] = exc

    a = threading.Thread(target=pe, args=(0,))
    a.start()
    deadline = time.monotonic() + 30
    while api._init_pending is None:  # A is inside its init (not a timing guess: the state says so)
        assert a.is_alive() and time.monotonic() < deadline, f"thread A never started its init: {outcome}"
        time.sleep(0.001)
    # A's init waits for PE 1 without the GIL (issue 29 item 17: it held it for the whole
    # bootstrap timeout, so no other thread of the process ran): this thread keeps ticking.
    time.sleep(0.3)  # A is now inside the native wait
    ticks, t_ticks = 0, time.monotonic()
    while time.monotonic() - t_ticks < 0.5:
        ticks += 1
        time.sleep(0.005)
    assert a.is_alive(), f"thread A's init ended early: {outcome}"
    assert ticks >= 20, f"this thread ran {ticks} times in 0.5 s while thread A waited in init (the GIL is held)"
    t0 = time.monotonic()
    pe(1)
    took = time.monotonic() - t0
    err = outcome[1]
    assert isinstance(err, Exception) and "threads as PEs" in str(err) and "PE 0 of 2" in str(err), err
    assert took < 2, f"the second thread's error took {took:.1f} s"
    a.join(timeout=120)
    assert not a.is_alive(), "thread A's init did not end within its bootstrap timeout"
    assert isinstance(outcome[0], Exception), outcome  # PE 1 never came
    assert not sh.shmem_initialized()
    print(f"threads as PEs refused at once ({took * 1e3:.1f} ms): {err}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
