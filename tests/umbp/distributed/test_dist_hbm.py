# SPDX-License-Identifier: MIT
"""GPU (HBM) pages in the distributed pool: a master (in-process) and two workers as processes on
one GPU. The owner has HBM pages (distributed.hbm); the other worker puts into them from host
memory and from a torch CUDA tensor and reads them back into host memory and into a CUDA tensor,
bytes checked exactly on fresh random data; the master reports the tier as HBM; a full HBM spills
puts to DRAM; eviction; an owner killed during a read is a miss, not a hang; a bad HBM setting
fails at construction naming it. The GPU cases skip without CUDA and torch; the last two cases
(the clear error without CUDA, a bad HBM size) run anywhere.

Run as a program, this file is one worker, driven by JSON lines on stdin (harness.ProgramPeer).
"""

from __future__ import annotations

import os
import random
import sys
import time
from pathlib import Path

import numpy as np
import pytest

MIB = 1 << 20


def value(seed: int, size: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8)


# -- the worker (run as a program) ------------------------------------------------------------
class HbmWorker:
    def __init__(self) -> None:
        self.client = None
        self.keep = []  # buffers of puts in flight stay alive until the answer

    def init(
        self, master: str, node_id: str, dram: int, hbm: int = 0, device: int = 0, buffer_sizes=None, ssd_dir: str = ""
    ):
        from mori.umbp import UMBPClient, UMBPConfig, UMBPDistributedConfig

        cfg = UMBPConfig()
        cfg.dram.capacity_bytes = dram
        cfg.dram.prefault = False
        cfg.ssd.enabled = bool(ssd_dir)
        if ssd_dir:
            cfg.ssd.storage_dir = ssd_dir
            cfg.ssd.capacity_bytes = 64 * MIB
            cfg.ssd.segment_size_bytes = 4 * MIB
        d = UMBPDistributedConfig()
        d.ssd_staging_buffer_size = 8 * MIB
        d.ssd_staging_buffer_slots = 4
        d.master_config.master_address = master
        d.master_config.node_id = node_id
        d.master_config.node_address = "127.0.0.1"
        d.io_engine.host = "127.0.0.1"
        d.staging_buffer_size = 4 * MIB
        d.cache_remote_fetches = False
        d.hbm.device = device
        d.hbm.capacity_bytes = hbm
        if buffer_sizes:
            d.hbm.buffer_sizes = buffer_sizes
        cfg.distributed = d
        self.client = UMBPClient(cfg)
        return {"peer": self.client.peer_address}

    def _buffers(self, n: int, size: int, cuda: bool, fill=None, seed: int = 0):
        import torch

        out = []
        for i in range(n):
            host = np.full(size, fill, dtype=np.uint8) if fill is not None else value(seed + i, size)
            t = torch.from_numpy(host)
            out.append(t.cuda() if cuda else t)
        if cuda:
            torch.cuda.synchronize()
        return out

    def put(self, keys: list, size: int, seed: int, cuda: bool = False):
        bufs = self._buffers(len(keys), size, cuda, seed=seed)
        ok = self.client.batch_put_from_ptr(keys, [b.data_ptr() for b in bufs], [size] * len(keys))
        return {"ok": list(ok)}

    def get(self, keys: list, size: int, seed: int, cuda: bool = False):
        bufs = self._buffers(len(keys), size, cuda, fill=0xA5)
        ok = self.client.batch_get_into_ptr(keys, [b.data_ptr() for b in bufs], [size] * len(keys))
        right, untouched = [], []
        for i, (o, b) in enumerate(zip(ok, bufs)):
            got = b.cpu().numpy()
            right.append(bool(o) and bool(np.array_equal(got, value(seed + i, size))))
            untouched.append(not o and bool((got == 0xA5).all()))
        return {"ok": list(ok), "right": right, "untouched_misses": untouched}

    def tiers(self, keys: list):
        """The tier each key is in here (0: not here; resolved, as a reader's resolve finds it:
        the full-sync snapshot would drop events not yet shipped) and the HBM pages' stats."""
        resolved = self.client.peer_resolve(keys)
        for r in resolved:
            if r[5]:
                self.client.peer_release(r[5])
        cap, used, _pinned, count, evictions = self.client.peer_hbm_stats()
        return {
            "tiers": [int(r[1]) if r[0] else 0 for r in resolved],
            "hbm": {"capacity": cap, "used": used, "keys": count, "evictions": evictions},
        }

    def evict(self, keys: list):
        return {"freed": list(self.client.peer_evict(keys))}  # what the master's EvictKey does here

    def heartbeat(self):
        self.client.heartbeat_now()
        return {}

    def flush(self):
        return {"ok": bool(self.client.flush())}

    def clear(self):
        return {"ok": bool(self.client.clear())}

    def close(self):
        if self.client is not None:
            self.client.close()
        return {}


def _main() -> None:
    from umbp_dist_worker import serve  # beside this file: the same JSON-lines loop

    serve(HbmWorker())


if __name__ == "__main__":
    _main()
    sys.exit(0)


# -- the tests ---------------------------------------------------------------------------------
from harness import ProgramPeer  # noqa: E402
from umbp_master_harness import fast_settings, running_master, uid  # noqa: E402

pytestmark = pytest.mark.timeout(180)


def _have_cuda() -> bool:
    if not (os.path.exists("/dev/nvidiactl") or os.path.exists("/dev/nvidia0")):
        return False  # no torch import (seconds) where no GPU can be
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


class Worker(ProgramPeer):
    def __init__(self) -> None:
        super().__init__([sys.executable, str(Path(__file__))], "umbp hbm worker", {"UMBP_LOOKUP_TIMEOUT_MS": "1000"})


def _start(*inits: dict) -> list[Worker]:
    workers = [Worker() for _ in inits]
    try:
        for w, kw in zip(workers, inits):
            w.send("init", **kw)
        for w in workers:
            w.answer("init", timeout=120)
    except BaseException:
        for w in workers:
            w.kill()
        raise
    return workers


@pytest.fixture(scope="module")
def master():
    with running_master(settings=fast_settings()) as m:
        yield m


@pytest.fixture
def own_master():
    """For the cases with workers of their own: the module's pool must not take their puts."""
    with running_master(settings=fast_settings()) as m:
        yield m


def _pair(master):
    """Worker a (DRAM only) and owner b (DRAM and 64 MiB of HBM on GPU 0): puts go to b's HBM."""
    ids = uid("a"), uid("b")
    a, b = _start(
        dict(master=master.address, node_id=ids[0], dram=16 * MIB),
        dict(master=master.address, node_id=ids[1], dram=32 * MIB, hbm=64 * MIB),
    )
    a.node_id, b.node_id = ids
    return a, b


@pytest.fixture(scope="module")
def pool(master):
    """Shared by the module's tests that leave both workers running (fresh keys each)."""
    if not _have_cuda():
        pytest.skip("needs a CUDA GPU and torch")
    a, b = _pair(master)
    yield a, b
    a.close()
    b.close()


def _route_tiers(master, node_id: str, keys: list) -> list[int]:
    import grpc

    from mori.umbp.proto import require

    pb, pb_grpc = require("umbp_pb2"), require("umbp_pb2_grpc")
    with grpc.insecure_channel(master.address) as ch:
        r = pb_grpc.UMBPMasterStub(ch).BatchRouteGet(pb.BatchRouteGetRequest(node_id=node_id, keys=keys), timeout=10)
    return list(r.tier)


def _keys(n: int) -> list[str]:
    return [uid("k") for _ in range(n)]


@pytest.mark.gpu
@pytest.mark.skipif(not _have_cuda(), reason="needs a CUDA GPU and torch")
@pytest.mark.parametrize("src_cuda,dst_cuda", [(False, False), (False, True), (True, False), (True, True)])
# 3 MiB x 2 from host memory: the writer's 4 MiB staging buffer holds the first only; the owner
# pulls that one, the writer writes the other into its HBM slot.
@pytest.mark.parametrize("size,batch", [(4096, 8), (3 * MIB, 2)])
def test_put_into_hbm_get_back(pool, master, src_cuda, dst_cuda, size, batch):
    from mori.umbp import UMBPTierType

    a, b = pool
    keys, seed = _keys(batch), random.randrange(1 << 30)
    assert a.ask("put", keys=keys, size=size, seed=seed, cuda=src_cuda)["ok"] == [True] * batch
    assert b.ask("tiers", keys=keys)["tiers"] == [int(UMBPTierType.HBM)] * batch  # b's HBM pages took them
    b.ask("heartbeat")  # the ADD events reach the master
    assert _route_tiers(master, a.node_id, keys) == [int(UMBPTierType.HBM)] * batch
    got = a.ask("get", keys=keys, size=size, seed=seed, cuda=dst_cuda)
    assert got["ok"] == [True] * batch and got["right"] == [True] * batch


@pytest.mark.gpu
@pytest.mark.skipif(not _have_cuda(), reason="needs a CUDA GPU and torch")
def test_owner_puts_and_gets_its_own_hbm(pool):
    """The HBM owner's own puts routed to its HBM (from a CUDA tensor: the DRAM store takes host
    memory only) and its own gets of them (a CUDA copy, no MORI-IO); the other worker reads them too."""
    from mori.umbp import UMBPTierType

    a, b = pool
    keys, seed, size = _keys(3), random.randrange(1 << 30), 256 * 1024 + 64
    assert b.ask("put", keys=keys, size=size, seed=seed, cuda=True)["ok"] == [True] * 3
    assert b.ask("tiers", keys=keys)["tiers"] == [int(UMBPTierType.HBM)] * 3
    b.ask("heartbeat")
    for w in (b, a):
        for cuda in (False, True):
            got = w.ask("get", keys=keys, size=size, seed=seed, cuda=cuda)
            assert got["right"] == [True] * 3, (w.node_id, cuda, got)


@pytest.mark.gpu
@pytest.mark.skipif(not _have_cuda(), reason="needs a CUDA GPU and torch")
def test_hbm_full_spills_to_dram(own_master):
    master = own_master
    from mori.umbp import UMBPTierType

    a, b = _start(
        dict(master=master.address, node_id=uid("a"), dram=8 * MIB),
        dict(master=master.address, node_id=uid("b"), dram=64 * MIB, hbm=4 * MIB),
    )
    try:
        size = 3 * MIB
        keys, seed = _keys(2), random.randrange(1 << 30)
        # The first takes 3 of b's 4 MiB of HBM (below the 0.9 high watermark: nothing evicted);
        # what is left below it takes no second one, which the master routes to DRAM (b's, the
        # larger), whether b's heartbeat has reported the first by then or not.
        for i, k in enumerate(keys):
            assert a.ask("put", keys=[k], size=size, seed=seed + i)["ok"] == [True]
        after = b.ask("tiers", keys=keys)
        assert after["tiers"] == [int(UMBPTierType.HBM), int(UMBPTierType.DRAM)]
        assert after["hbm"]["evictions"] == 0
        for i, k in enumerate(keys):
            got = a.ask("get", keys=[k], size=size, seed=seed + i, cuda=True)
            assert got["right"] == [True], (k, got)
    finally:
        a.close()
        b.close()


@pytest.mark.gpu
@pytest.mark.skipif(not _have_cuda(), reason="needs a CUDA GPU and torch")
def test_hbm_eviction(pool):
    from mori.umbp import UMBPTierType

    a, b = pool
    keys, seed = _keys(2), random.randrange(1 << 30)
    assert a.ask("put", keys=keys, size=MIB, seed=seed)["ok"] == [True, True]
    before = b.ask("tiers", keys=keys)["hbm"]
    freed = b.ask("evict", keys=[keys[0]])["freed"]
    assert freed[0] >= MIB
    after = b.ask("tiers", keys=keys)
    assert after["tiers"] == [0, int(UMBPTierType.HBM)]
    assert after["hbm"]["used"] == before["used"] - freed[0]
    b.ask("heartbeat")  # the REMOVE reaches the master
    got = a.ask("get", keys=keys, size=MIB, seed=seed)
    assert got["ok"] == [False, True] and got["untouched_misses"][0] and got["right"][1]


@pytest.mark.gpu
@pytest.mark.skipif(not _have_cuda(), reason="needs a CUDA GPU and torch")
def test_hbm_value_gets_its_ssd_copy(own_master, tmp_path):
    """An HBM value's SSD copy (the owner's copy pipeline stages it through host memory): once
    evicted from HBM, the value is read from the owner's SSD, exact."""
    from mori.umbp import UMBPTierType

    a, b = _start(
        dict(master=own_master.address, node_id=uid("a"), dram=16 * MIB),
        dict(master=own_master.address, node_id=uid("b"), dram=32 * MIB, hbm=16 * MIB, ssd_dir=str(tmp_path / "b")),
    )
    try:
        keys, seed, size = _keys(2), random.randrange(1 << 30), MIB + 123
        assert a.ask("put", keys=keys, size=size, seed=seed, cuda=True)["ok"] == [True, True]
        assert b.ask("tiers", keys=keys)["tiers"] == [int(UMBPTierType.HBM)] * 2
        # Pinned in HBM until its SSD copy is done: evictable after that.
        deadline = time.monotonic() + 30
        while b.ask("evict", keys=[keys[0]])["freed"][0] == 0:
            assert time.monotonic() < deadline, "the HBM value never became evictable (no SSD copy?)"
            time.sleep(0.05)
        assert b.ask("tiers", keys=keys)["tiers"] == [int(UMBPTierType.SSD), int(UMBPTierType.HBM)]
        b.ask("heartbeat")
        for cuda in (False, True):
            got = a.ask("get", keys=keys, size=size, seed=seed, cuda=cuda)
            assert got["right"] == [True, True], got
    finally:
        a.close()
        b.close()


@pytest.mark.gpu
@pytest.mark.skipif(not _have_cuda(), reason="needs a CUDA GPU and torch")
def test_flush_waits_for_hbm_copies_and_clear_drops_hbm_values(own_master, tmp_path):
    """flush() returns once the HBM values' SSD copies are done (each is evictable from HBM at
    once, then read from the SSD, exact); clear() drops the HBM values too (the worker's HBM
    pages hold no key, a reader misses them once the REMOVE events reached the master)."""
    from mori.umbp import UMBPTierType

    a, b = _start(
        dict(master=own_master.address, node_id=uid("a"), dram=16 * MIB),
        dict(master=own_master.address, node_id=uid("b"), dram=32 * MIB, hbm=16 * MIB, ssd_dir=str(tmp_path / "b")),
    )
    try:
        keys, seed, size = _keys(3), random.randrange(1 << 30), 2 * MIB + 77
        assert a.ask("put", keys=keys, size=size, seed=seed, cuda=True)["ok"] == [True] * 3
        assert b.ask("tiers", keys=keys)["tiers"] == [int(UMBPTierType.HBM)] * 3
        assert b.ask("flush")["ok"]
        assert all(f >= size for f in b.ask("evict", keys=keys[:2])["freed"])  # no copy still pinning them
        assert b.ask("tiers", keys=keys)["tiers"] == [int(UMBPTierType.SSD)] * 2 + [int(UMBPTierType.HBM)]
        b.ask("heartbeat")
        got = a.ask("get", keys=keys, size=size, seed=seed)
        assert got["right"] == [True] * 3, got

        more, seed2 = _keys(2), random.randrange(1 << 30)
        assert a.ask("put", keys=more, size=size, seed=seed2, cuda=True)["ok"] == [True] * 2
        assert b.ask("tiers", keys=more)["tiers"] == [int(UMBPTierType.HBM)] * 2
        assert b.ask("clear")["ok"]
        after = b.ask("tiers", keys=keys + more)
        assert after["tiers"] == [0] * 5, after
        assert after["hbm"]["keys"] == 0, after
        b.ask("heartbeat")  # the REMOVE events reach the master
        got = a.ask("get", keys=more, size=size, seed=seed2)
        assert got["ok"] == [False, False] and all(got["untouched_misses"]), got
    finally:
        a.close()
        b.close()


@pytest.mark.gpu
@pytest.mark.skipif(not _have_cuda(), reason="needs a CUDA GPU and torch")
def test_owner_killed_mid_read_is_a_miss(own_master):
    a, b = _pair(own_master)  # b is killed: a pair of its own
    keys, seed = _keys(4), random.randrange(1 << 30)
    assert a.ask("put", keys=keys, size=3 * MIB, seed=seed)["ok"] == [True] * 4
    b.ask("heartbeat")
    a.send("get", keys=keys, size=3 * MIB, seed=seed, cuda=True)
    b.kill()
    t0 = time.monotonic()
    got = a.answer("get", timeout=60)  # a deadline, not a hang
    assert "error" not in got, got
    # Whatever arrived before the kill is exact; the rest are misses.
    assert all(r or not o for o, r in zip(got["ok"], got["right"]))
    assert time.monotonic() - t0 < 60
    a.close()


@pytest.mark.gpu
@pytest.mark.skipif(not _have_cuda(), reason="needs a CUDA GPU and torch")
def test_bad_hbm_device_names_the_setting(master):
    w = Worker()
    try:
        w.send("init", master=master.address, node_id=uid("bad"), dram=8 * MIB, hbm=MIB, device=99)
        with pytest.raises(AssertionError, match=r"distributed\.hbm\.device is 99"):
            w.answer("init", timeout=120)
    finally:
        w.kill()


# -- anywhere (CI) ------------------------------------------------------------------------------
def _cuda_device_present() -> bool:
    return os.path.exists("/dev/nvidia0") or os.path.exists("/dev/nvidiactl")


@pytest.mark.skipif(_cuda_device_present(), reason="a CUDA device is here: the HBM arena would be made")
def test_hbm_without_cuda_fails_at_construction_naming_it():
    from mori.umbp import UMBPClient, UMBPConfig, UMBPDistributedConfig

    cfg = UMBPConfig()
    cfg.dram.capacity_bytes = 4 * MIB
    cfg.dram.prefault = False
    cfg.ssd.enabled = False
    d = UMBPDistributedConfig()
    d.master_config.master_address = "127.0.0.1:1"  # never reached: construction fails first
    d.master_config.node_id = uid("nocuda")
    d.master_config.node_address = "127.0.0.1"
    d.io_engine.host = "127.0.0.1"
    d.hbm.capacity_bytes = MIB
    cfg.distributed = d
    with pytest.raises(Exception, match=r"distributed\.hbm"):
        UMBPClient(cfg)
    cfg.dram.capacity_bytes = 0  # a lookup-only node: no pages of any kind
    with pytest.raises(Exception, match=r"distributed\.hbm: a lookup-only node"):
        UMBPClient(cfg)


def test_bad_hbm_sizes_name_the_setting():
    from mori.umbp import UMBPConfig, UMBPDistributedConfig

    cfg = UMBPConfig()
    d = UMBPDistributedConfig()
    d.master_config.master_address = "127.0.0.1:1"
    d.master_config.node_id = "n"
    d.master_config.node_address = "127.0.0.1"
    assert d.hbm.total_bytes() == 0  # off by default
    d.hbm.buffer_sizes = [MIB, 0]
    cfg.distributed = d
    with pytest.raises(Exception, match=r"distributed\.hbm\.buffer_sizes\[1\] must be > 0"):
        cfg.validate()
    d.hbm.buffer_sizes = [MIB, 2 * MIB]
    d.hbm.device = -1
    cfg.distributed = d
    with pytest.raises(Exception, match=r"distributed\.hbm\.device must be >= 0"):
        cfg.validate()
    d.hbm.device = 0
    assert d.hbm.total_bytes() == 3 * MIB
