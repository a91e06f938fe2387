# SPDX-License-Identifier: MIT
"""Remote gets of values that live only on their owner's SSD (issue 28): the owner stages each
into its SSD staging buffer, a value larger than one staging slot in adjacent slots, and the
other worker reads it from there; a value larger than the whole staging buffer is a miss that
the reader's log explains (the size and distributed.ssd_staging_buffer_size)."""

from __future__ import annotations

import random
import time

import pytest
from dist_harness import start_workers
from umbp_master_harness import fast_settings, running_master, uid

from mori.umbp.distributed import UMBPMasterClient
from mori.umbp.proto import require

pytestmark = pytest.mark.timeout(120)
MIB = 1 << 20
STAGING, SLOTS = 16 * MIB, 8  # 2 MiB slots


def leases_drop_to_zero(owner, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while owner.ask("stats")["peer_state"][3] != 0:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_ssd_only_values_larger_than_a_staging_slot_read_from_the_other_worker(tmp_path):
    pb = require("umbp_pb2")
    # One staging slot exactly, one a byte over (two slots), 7 and 12 MiB (4 and 6 slots) as
    # in the issue, then one larger than the staging buffer: refused.
    sizes = [2 * MIB, 2 * MIB + 1, 7 * MIB, 12 * MIB]
    too_large = STAGING + 4096
    with running_master(settings=fast_settings(route_put_affinity="local")) as master:
        owner, reader = start_workers(
            dict(
                master=master.address,
                node_id=uid("owner"),
                dram=24 * MIB,
                ssd_dir=str(tmp_path / "ssd"),
                ssd_capacity=128 * MIB,
                ssd_staging=STAGING,
                ssd_slots=SLOTS,
            ),
            dict(master=master.address, node_id=uid("reader"), dram=4 * MIB),
        )
        try:
            seed = random.randrange(1 << 30)
            keys = [uid("v") for _ in sizes]
            big = uid("big")
            filler = uid("filler")
            for i, (k, n) in enumerate(zip(keys, sizes)):
                assert owner.ask("put", keys=[k], size=n, seed=seed + i)["ok"] == [True]
                owner.ask("flush")
            assert owner.ask("put", keys=[big], size=too_large, seed=seed + 100)["ok"] == [True]
            owner.ask("flush")
            # The filler pushes every value above out of the owner's 24 MiB DRAM: SSD only.
            assert owner.ask("put", keys=[filler], size=too_large, seed=seed + 200)["ok"] == [True]
            owner.ask("flush")
            owner.ask("heartbeat")
            with UMBPMasterClient(master.address, node_id=uid("sched")) as mc:
                routes = mc.batch_route_get(keys + [big])
            assert [r[2] if r else None for r in routes] == [pb.TIER_SSD] * (len(sizes) + 1)
            assert [r[3] for r in routes] == sizes + [too_large]
            assert reader.ask("exists", keys=keys + [big])["found"] == [True] * (len(sizes) + 1)
            # Key i was put with seed + i: each is checked against its own random bytes.
            for i, (k, n) in enumerate(zip(keys, sizes)):
                assert reader.ask("get", keys=[k], size=n, seed=seed + i)["right"] == [True], (k, n)
                # The reader released its staging lease: the owner holds none a moment later, long
                # before the lease would run out by itself (UMBP_SSD_READ_LEASE_MS, 3 s).
                assert leases_drop_to_zero(owner, within_s=1.0), (k, n)
            # All at once: the owner's slots are shared among them (NO_SLOT is retried).
            got = reader.ask("get", keys=keys[:2], size=2 * MIB, seed=seed)
            assert got["right"] == [True, False]  # key 1's size is 2 MiB + 1: a miss, as locally
            assert reader.ask("get", keys=[big], size=too_large, seed=seed + 100)["right"] == [False]
            # Reads staged copies: the SSD still holds every value.
            assert owner.ask("stats")["stats"]["ssd_keys"] == len(sizes) + 2
        finally:
            owner.close()
            reader.close()
