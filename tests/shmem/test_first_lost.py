# SPDX-License-Identifier: MIT
"""Issue 29 item 10: when PE 3 of 2 x 2 is killed, every survivor names PE 3 first, including
PE 0, which sees PE 1 (its host) leave after failing on PE 3's loss."""

from __future__ import annotations

import os
import re

import pytest

from mori.core.ports import job_master_port

from harness import collect, env_rank, python_program, start_rank


def _run_once() -> dict[int, str]:
    port, secret = job_master_port(), os.urandom(32).hex()  # rank 0 hosts the store on port + 1
    # Two pretend hosts of 2 PEs each (their own node ids), so PEs of the other host are network peers.
    procs = [
        start_rank(
            python_program("first_lost.py"),
            env_rank(
                rank,
                4,
                port,
                secret,
                {
                    "LOCAL_RANK": str(rank % 2),
                    "LOCAL_WORLD_SIZE": "2",
                    "MORI_NODE_ID": f"host{rank // 2}",
                    "MORI_BOOTSTRAP_TIMEOUT": "20",
                },
            ),
        )
        for rank in range(4)
    ]
    return dict(enumerate(collect(procs, timeout=60)))


@pytest.mark.parametrize("attempt", range(2))  # the race it guards against went wrong 1 run in 2
def test_every_survivor_names_the_killed_pe_first(attempt):
    outs = _run_once()
    for pe in (0, 1, 2):
        m = re.search(rf"PE {pe} caught (\w+): (.*)", outs[pe])
        assert m, f"PE {pe}:\n{outs[pe]}"
        message = re.sub(rf"^(.*?\bon )?PE {pe}:\s*", "", m.group(2))  # "<call> on PE 0: " or "PE 1: "
        named = re.findall(r"PE (\d+)", message)
        assert named and named[0] == "3", f"PE {pe} names PE {named[:1]} first: {m.group(2)}"
