# SPDX-License-Identifier: MIT
"""The PE side of the hostile-client tests (tests/hostile/test_network_attacks.py, test_tcp_hosts.py).

    mori run ... tcp_guard_target.py WORKDIR

PE 1 publishes PE 0's tcp endpoint and the heap offset of a symmetric buffer in
WORKDIR/target.json. Then every PE idles *outside* MORI (PE 0's target engine
must serve the client on its own) until WORKDIR/client.json appears. PE 0 then
checks that exactly the client's one valid put landed, nothing next to it
changed, and the job's own tcp traffic still flows both ways.
"""

from __future__ import annotations

import json
import os
import sys
import time

import numpy as np

import mori.shmem as sh
from mori import _C


def addr(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def main(workdir: str) -> None:
    sh.init()
    me, n = sh.my_pe(), sh.n_pes()
    assert sh.transport_name((me + 1) % n) == "tcp", "this test needs PEs on different nodes"
    guard_lo = sh.zeros(4096, np.uint8)
    buf = sh.zeros(1024, np.uint8)
    guard_hi = sh.zeros(4096, np.uint8)
    if me == 1:
        info = {
            "endpoint": _C.shmem.transport_endpoint(0),
            "offset": addr(buf) - _C.shmem.heap_base(),
            "heap_size": _C.shmem.heap_size(),
            "n_pes": n,
        }
        tmp = os.path.join(workdir, "target.json.tmp")
        with open(tmp, "w") as f:
            json.dump(info, f)
        os.rename(tmp, os.path.join(workdir, "target.json"))
    done = os.path.join(workdir, "client.json")
    deadline = time.monotonic() + 90
    while not os.path.exists(done):
        if time.monotonic() > deadline:
            raise TimeoutError(f"PE {me}: the hostile client never finished")
        time.sleep(0.05)
    with open(done) as f:
        result = json.load(f)
    if "error" in result:
        raise SystemExit(f"PE {me}: client failed: {result['error']}")
    sh.barrier_all()
    if me == 0:
        expected = np.frombuffer(bytes.fromhex(result["payload"]), np.uint8)
        assert np.array_equal(buf, expected), "the client's valid put did not land intact"
        assert not guard_lo.any() and not guard_hi.any(), "memory next to the client's buffer changed"
    # The job's own connections are unharmed: a ring of puts and gets with fresh data.
    rng = np.random.default_rng(int(result["seed"]))
    data = rng.integers(-(2**62), 2**62, size=(n, 100_000))
    ring = sh.zeros(100_000, np.int64)
    sh.put(ring, data[me], pe=(me + 1) % n)
    sh.barrier_all()
    assert np.array_equal(ring, data[(me - 1) % n]), "put after the attack"
    back = np.empty(100_000, np.int64)
    sh.get(back, ring, pe=(me + 1) % n)
    assert np.array_equal(back, data[me]), "get after the attack"
    sh.barrier_all()
    if me == 0:
        print(f"target survived the hostile client and serves {n} PEs")
    sh.finalize()


if __name__ == "__main__":
    main(sys.argv[1])
