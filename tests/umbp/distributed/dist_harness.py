# SPDX-License-Identifier: MIT
"""Distributed UMBP workers as real processes (umbp_dist_worker.py), driven from the tests."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Optional, Sequence

from harness import ProgramPeer

PROGRAM = Path(__file__).parent / "umbp_dist_worker.py"


def start_workers(
    *inits: dict, env: Optional[dict] = None, prefixes: Optional[Sequence[Sequence[str]]] = None
) -> list["Worker"]:
    """One worker per ``init`` keyword dict, started and initialised in parallel; ``prefixes``:
    per worker the command it runs under (e.g. ``ip netns exec NAME``)."""
    workers = [Worker(env=env, prefix=prefixes[i] if prefixes else ()) for i in range(len(inits))]
    try:
        for w, kw in zip(workers, inits):
            w.send("init", **kw)
        for w in workers:
            w.info = w.answer("init")
    except BaseException:
        for w in workers:
            w.kill()
        raise
    return workers


def start_writer_and_owner(master_address: str, env: Optional[dict] = None) -> tuple["Worker", "Worker"]:
    """Worker a (16 MiB of DRAM) and worker b (160 MiB): most_available routes a's puts to b."""
    from umbp_master_harness import uid

    a, b = start_workers(
        dict(master=master_address, node_id=uid("a"), dram=16 << 20, pool_bytes=16 << 20),
        dict(master=master_address, node_id=uid("b"), dram=160 << 20, pool_bytes=16 << 20),
        env=env,
    )
    return a, b


class Worker(ProgramPeer):
    """One umbp_dist_worker.py process; ``ask`` sends a command and returns its answer."""

    def __init__(self, env: Optional[dict] = None, prefix: Sequence[str] = ()) -> None:
        lookup = os.environ.get("UMBP_LOOKUP_TIMEOUT_MS", "1000")  # fast misses unless the run says otherwise
        # No background place feed unless a test asks for it (or reads it with "place_feed"): the
        # tests of the routed paths count which path each read took.
        feed = os.environ.get("UMBP_PLACE_FEED_MS", "0")
        super().__init__(
            [*prefix, sys.executable, str(PROGRAM)],
            "umbp worker",
            {"UMBP_LOOKUP_TIMEOUT_MS": lookup, "UMBP_PLACE_FEED_MS": feed, **(env or {})},
        )
        self.info: dict = {}  # the answer to "init"

    def moved_since(self, before: dict) -> str:
        """This worker's counters that moved since ``before`` (an earlier ``ask("stats")["stats"]``)
        and the end of its log: a failed assertion's message, naming what the calls ran into."""
        after = self.ask("stats")["stats"]
        moved = {
            k: v - before.get(k, 0) for k, v in after.items() if isinstance(v, (int, float)) and v != before.get(k)
        }
        return f"counters that moved: {moved}\nlog:\n{self.stderr_so_far()[-3000:]}"
