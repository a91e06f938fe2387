# SPDX-License-Identifier: MIT
"""One distributed UMBP worker (an "engine") in its own process, driven over stdin/stdout by the
tests: one JSON command per line, one JSON answer per line. Values are random bytes made from a
seed, so the test (and the other worker) can tell the right bytes from any others."""

from __future__ import annotations

import hashlib
import json
import sys
import traceback
from typing import Optional

import numpy as np


def value(seed: int, size: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8)


class Worker:
    def __init__(self) -> None:
        self.client = None
        self.pool = None  # a registered "KV pool" (zero-copy reads and writes)

    def init(
        self,
        master: str,
        node_id: str,
        dram: int = 64 << 20,
        ssd_dir: str = "",
        cache_remote: bool = False,
        admission: str = "SIZE",
        pool_bytes: int = 0,
        staging: int = 4 << 20,
        host: str = "127.0.0.1",
        ssd_capacity: int = 64 << 20,
        lookup_only: bool = False,
        sglang: bool = False,
        ssd_staging: int = 8 << 20,
        ssd_slots: int = 4,
    ):
        from mori.umbp import CacheRemoteAdmission, UMBPClient, UMBPConfig, UMBPDistributedConfig

        if sglang:  # SGLang's UMBPStore: from the environment, role forced Standalone
            from mori.umbp import UMBPRole

            cfg = UMBPConfig.from_environment()
            cfg.role = UMBPRole.Standalone
            cfg.copy_pipeline.worker_threads = 1
        else:
            cfg = UMBPConfig()
        cfg.dram.capacity_bytes = 0 if lookup_only else dram
        cfg.dram.prefault = False
        cfg.ssd.enabled = bool(ssd_dir)
        if ssd_dir:
            cfg.ssd.storage_dir = ssd_dir
            cfg.ssd.capacity_bytes = ssd_capacity
            cfg.ssd.segment_size_bytes = 4 << 20
        d = UMBPDistributedConfig()
        d.master_config.master_address = master
        d.master_config.node_id = node_id
        d.master_config.node_address = host
        d.master_config.auto_heartbeat = True
        d.io_engine.host = host
        d.io_engine.port = 0
        d.peer_service_port = 0
        d.staging_buffer_size = staging
        d.ssd_staging_buffer_size = ssd_staging
        d.ssd_staging_buffer_slots = ssd_slots
        d.cache_remote_fetches = cache_remote
        d.cache_remote_admission = getattr(CacheRemoteAdmission, admission)
        d.admission_max_block_bytes = 1 << 20
        cfg.distributed = d
        self.client = UMBPClient(cfg)
        if pool_bytes:
            self.pool = np.zeros(pool_bytes, dtype=np.uint8)
            self.client.register_memory(self.pool.ctypes.data, pool_bytes)
        return {
            "peer": self.client.peer_address,
            "mode": str(self.client.get_deployment_mode()),
            "distributed": self.client.is_distributed(),
        }

    # -- values from seeds ----------------------------------------------------------------------
    def put(self, keys: list, size: int, seed: int, pool: bool = False, depths=None):
        bufs = [value(seed + i, size) for i in range(len(keys))]
        if pool:  # the values sit in the registered pool, page after page
            for i, b in enumerate(bufs):
                self.pool[i * size : (i + 1) * size] = b
            ptrs = [self.pool.ctypes.data + i * size for i in range(len(keys))]
        else:
            ptrs = [b.ctypes.data for b in bufs]
        if depths is not None:
            ok = self.client.batch_put_from_ptr_with_depth(keys, ptrs, [size] * len(keys), depths)
        else:
            ok = self.client.batch_put_from_ptr(keys, ptrs, [size] * len(keys))
        return {"ok": list(ok)}

    def get(self, keys: list, size: int, seed: int, pool: bool = False):
        if pool:
            self.pool[: len(keys) * size] = 0xA5
            ptrs = [self.pool.ctypes.data + i * size for i in range(len(keys))]
            views = [self.pool[i * size : (i + 1) * size] for i in range(len(keys))]
        else:
            views = [np.full(size, 0xA5, dtype=np.uint8) for _ in keys]
            ptrs = [v.ctypes.data for v in views]
        ok = self.client.batch_get_into_ptr(keys, ptrs, [size] * len(keys))
        right = [bool(o) and bool(np.array_equal(v, value(seed + i, size))) for i, (o, v) in enumerate(zip(ok, views))]
        untouched = [not o and bool((v == 0xA5).all()) for o, v in zip(ok, views)]
        return {"ok": list(ok), "right": right, "untouched_misses": untouched}

    def exists(self, keys: list):
        return {
            "found": list(self.client.batch_exists(keys)),
            "consecutive": self.client.batch_exists_consecutive(keys),
        }

    def stats(self):
        server = getattr(getattr(self.client, "_server", None), "_server", None)
        return {
            "stats": {k: v for k, v in self.client.stats().items() if isinstance(v, (int, float, bool))},
            "peer_state": list(self.client.peer_event_state()) if not self.client._lookup_only else [],
            # The threads of its grpc++ UMBPPeer server (None: grpcio's, or none).
            "peer_threads": getattr(server, "workers", None),
        }

    def drop_bundle(self):
        self.client._drop_next_bundle = True
        return {}

    def locations(self, keys: list, extend_s: float = 0.0, misplace: Optional[list] = None):
        """Test hook on the reader's location cache: how many of keys it holds; extend_s keeps them
        valid that long (the test then does not race the read lease); misplace [a, b] points a's
        location at b's value (as if a was removed and its block reused)."""
        import time

        locs = self.client._locations  # the native UMBPLocationCache
        for k in keys:
            if extend_s:
                locs.adjust(k, expires=time.monotonic() + extend_s)
        if misplace:
            locs.adjust(misplace[0], offset=locs.peek(misplace[1])[2])
        return {"held": sum(locs.peek(k) is not None for k in keys)}

    def peers_down(self):
        """The peers this worker holds off (failed within the hold-off)."""
        import time

        now = time.monotonic()
        return {"down": sorted(n for n, until in self.client._peers_down.items() if until > now)}

    def corrupt(self, key: str):
        """Test hook on an owner: flips one byte in the middle of key's value in the DRAM arena (as
        a bad page would); its checksum, taken at commit, stays."""
        import ctypes

        found, _tier, offset, size, _checksum, lease = self.client.peer_resolve([key])[0]
        assert found, f"corrupt: {key} is not in this worker's DRAM"
        self.client.peer_release(lease)
        byte = ctypes.c_uint8.from_address(self.client.peer_arena()[0] + offset + size // 2)
        byte.value ^= 0xFF
        return {}

    def late_pulls(self, count: int = 1, past_s: float = 0.3):
        """Test hook on the owner's pulled puts: the next ``count`` pulls start only ``past_s``
        after their writer's deadline (as a stalled owner's would), then read for real."""
        import time

        service = self.client._server.service
        real, puts = service._pull, self.client._peer_puts
        # One count for both paths: the pulls the grpc++ server runs in C++ take it there.
        puts.hold_next(count, past_s)

        def late(source: bytes, items: list, seconds: float, **kw) -> bool:
            past = puts.take_hold()
            if past >= 0:
                time.sleep(seconds + past)  # seconds: what was left of the writer's deadline
            return real(source, items, seconds, **kw)

        service._pull = late
        return {}

    def io_backend(self, node_id: str):
        """The MORI-IO path this worker's registered pool takes to a peer's arena (tcp, cma, ...)."""
        desc = self.client._region_of(self.pool.ctypes.data, self.pool.nbytes)[0]
        return {"backend": self.client._engine.backend_for(desc, self.client._peers[node_id].arena)}

    def heartbeat(self):
        self.client.heartbeat_now()
        return {}

    def place_feed(self):
        """Reads the master's place feed until it has nothing more (UMBP_PLACE_FEED_MS=0 in the
        tests unless a test sets it: then only this reads it)."""
        rounds = 1
        while self.client.place_feed_now():
            rounds += 1
        return {"rounds": rounds}

    def clear(self):
        return {"ok": self.client.clear()}

    def flush(self):
        return {"ok": self.client.flush()}

    def digest(self, key: str, size: int):
        buf = np.zeros(size, dtype=np.uint8)
        ok = self.client.get_into_ptr(key, buf.ctypes.data, size)
        return {"ok": ok, "sha": hashlib.sha256(buf.tobytes()).hexdigest()}

    def close(self):
        if self.client is not None:
            self.client.close()
        return {}


def serve(w) -> None:
    """Answers JSON-lines commands on stdin with w's methods (one JSON line each) until "quit"."""
    for line in sys.stdin:
        req = json.loads(line)
        cmd = req.pop("cmd")
        if cmd == "quit":
            w.close()
            print(json.dumps({}), flush=True)
            return
        try:
            out = getattr(w, cmd)(**req)
        except Exception as exc:  # noqa: BLE001 - reported to the test
            out = {"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()}
        print(json.dumps(out), flush=True)


def main() -> None:
    serve(Worker())


if __name__ == "__main__":
    main()
