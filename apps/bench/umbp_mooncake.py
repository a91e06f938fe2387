# SPDX-License-Identifier: MIT
"""Mooncake Store as the peer baseline of ``mori bench umbp``: a ``mooncake_master`` on loopback
and one ``MooncakeDistributedStore`` in the benchmark's process that contributes the memory
segment and is the client (Mooncake's "real client"), metadata ``P2PHANDSHAKE``, protocol tcp,
zero-copy ``register_buffer`` + ``batch_put_from`` / ``batch_get_into`` on the same buffers as
UMBP's rows. PyPI ``mooncake-transfer-engine-non-cuda`` (scripts/bench-umbp-setup.sh)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from typing import Optional

from mori.apps.bench.processes import hold_until, stop as stop_processes
from mori.apps.launcher import _die_with_launcher
from mori.apps.bench.umbp_workload import HostBuffers, Row, Sample, check_all, iterations, sglang_keys, verify
from mori.core.errors import RemoteError, Timeout
from mori.core.ports import free_port, wait_port


def unavailable() -> Optional[str]:
    """Why Mooncake Store cannot run here (None when it can)."""
    if importlib.util.find_spec("mooncake") is None:
        return "mooncake-transfer-engine-non-cuda is not installed (scripts/bench-umbp-setup.sh)"
    try:
        from mooncake.store import MooncakeDistributedStore  # noqa: F401
    except Exception as exc:  # an ImportError, or a shared library that does not load
        return f"mooncake.store does not import: {exc!r}"
    if master_binary() is None:
        return "mooncake_master is not found next to the Python interpreter, in the mooncake package or on PATH"
    return None


def master_binary() -> Optional[str]:
    candidates = [os.path.join(os.path.dirname(sys.executable), "mooncake_master")]
    spec = importlib.util.find_spec("mooncake")
    if spec is not None and spec.origin:
        candidates.append(os.path.join(os.path.dirname(spec.origin), "mooncake_master"))
    for c in candidates:
        if os.access(c, os.X_OK):
            return c
    return shutil.which("mooncake_master")


def start_master(ip: str, workdir: str, timeout_s: float = 30, attempts: int = 3) -> tuple[subprocess.Popen, str, str]:
    """A ``mooncake_master`` listening on ``ip``; returns it, its ``ip:port`` and its log's path
    once it accepts connections. It is killed with this process, however that dies. Its two
    ports are free when chosen but may be taken before it binds them (it then aborts): a master
    that exits before listening is started again on other ports, ``attempts`` times in all."""
    attempt = 0
    while True:
        attempt += 1
        port = free_port(ip)
        log_path = os.path.join(workdir, f"mooncake_master-{port}.log")
        with open(log_path, "wb") as log:
            master = subprocess.Popen(
                [
                    master_binary(),
                    f"--rpc_port={port}",
                    f"--rpc_address={ip}",
                    f"--metrics_host={ip}",
                    f"--metrics_port={free_port(ip)}",
                    "--enable_metric_reporting=false",
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=_die_with_launcher(),
            )
        try:
            wait_port(port, host=ip, timeout=timeout_s, process=master)
            return master, f"{ip}:{port}", log_path
        except RemoteError as exc:
            if attempt >= attempts:
                raise RuntimeError(f"mooncake_master: {exc}, {attempts} times (last log: {log_path})") from None
            with open(log_path, errors="replace") as log:
                last = (log.read().strip().splitlines() or ["(empty log)"])[-1]
            print(f"mooncake_master: {exc}: {last}; starting it again on other ports", file=sys.stderr, flush=True)
        except Timeout as exc:
            stop_processes([master])
            raise RuntimeError(f"mooncake_master: {exc} (log: {log_path})") from None


def open_store(ip: str, master: str, segment_bytes: int):
    """A ``MooncakeDistributedStore`` on ``ip`` (metadata P2PHANDSHAKE, protocol tcp) that mounts
    ``segment_bytes`` of this process's memory into the pool (0: a client that mounts none)."""
    from mooncake.store import MooncakeDistributedStore

    store = MooncakeDistributedStore()
    rc = store.setup(ip, "P2PHANDSHAKE", segment_bytes, 16 << 20, "tcp", "", master)
    if rc != 0:
        raise RuntimeError(f"MooncakeDistributedStore.setup({ip!r}, master {master}) returned {rc}")
    return store


def owner_main(ip: str, master: str, segment_bytes: int, ready, stop) -> None:
    """A process that owns the pool's memory: it mounts the segment, says so on ``ready``
    (``None``, or why it could not) and holds it until ``stop`` is set."""
    try:
        store = open_store(ip, master, segment_bytes)
    except Exception as exc:  # noqa: BLE001 - the reason goes back to the benchmark
        ready.put(repr(exc))
        return
    ready.put(None)
    hold_until(stop)
    store.close()


class MooncakeStore:
    """A master on loopback and one store that mounts ``segment_bytes`` of this process's memory."""

    def __init__(self, segment_bytes: int, workdir: str, timeout_s: float = 30) -> None:
        self.master, address, self.log = start_master("127.0.0.1", workdir, timeout_s)
        try:
            self.store = open_store("127.0.0.1", address, segment_bytes)
        except BaseException:
            stop_processes([self.master])
            raise
        self.registered: list[int] = []

    def register(self, buf: HostBuffers) -> None:
        for ptr, size in ((buf.src_ptr, buf.nbytes), (buf.dst_ptr, buf.nbytes)):
            rc = self.store.register_buffer(ptr, size)
            if rc != 0:
                raise RuntimeError(f"Mooncake register_buffer returned {rc}")
            self.registered.append(ptr)

    def put(self, buf: HostBuffers, row: Row, iters: int, budget_s: float) -> tuple[list[Sample], list[str]]:
        """Batch puts of fresh keys; everything stored is removed (untimed) ahead of each call, so
        the segment never fills and no call pays for Mooncake's eviction."""
        ptrs, sizes = row.src_ptrs(buf), row.sizes()
        state: dict = {}

        def before(i: int) -> None:
            self.store.remove_all(True)
            state["keys"] = sglang_keys(row.batch, f"mcp{row.size:x}b{row.batch}i{i + 1}")

        def call() -> None:
            rcs = self.store.batch_put_from(state["keys"], ptrs, sizes)
            check_all([rc == 0 for rc in rcs], f"Mooncake batch_put_from (codes {sorted(set(rcs))})")

        samples = iterations(call, iters, budget_s, before=before)
        return samples, state["keys"]

    def get(self, buf: HostBuffers, row: Row, keys: list[str], iters: int, budget_s: float) -> list[Sample]:
        ptrs, sizes = row.dst_ptrs(buf), row.sizes()
        buf.dst[: row.nbytes] = 0
        state = {"checked": False}

        def call() -> None:
            got = self.store.batch_get_into(keys, ptrs, sizes)
            check_all([n == row.size for n in got], "Mooncake batch_get_into")
            if not state["checked"]:
                verify(buf, row, "Mooncake batch_get_into")
                state["checked"] = True

        return iterations(call, iters, budget_s)

    def exists(self, keys: list[str], iters: int) -> list[Sample]:
        from mori.apps.bench.umbp_workload import fixed_iterations

        def call() -> None:
            found = self.store.batch_is_exist(keys)
            if not all(f == 1 for f in found):
                raise RuntimeError("Mooncake batch_is_exist: a key put before is missing")

        return fixed_iterations(call, iters)

    def close(self) -> None:
        """Removes everything, closes the store, stops the master (a second call does nothing)."""
        if self.master.poll() is not None and not self.registered:
            return
        try:
            self.store.remove_all(True)
            for ptr in self.registered:
                self.store.unregister_buffer(ptr)
            self.store.close()
        finally:
            self.registered.clear()
            stop_processes([self.master])
