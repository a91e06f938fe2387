# SPDX-License-Identifier: MIT
"""One conformance suite for every transport on one host: shm, tcp (MORI_DISABLE_P2P=1 routes
every peer through it), and ucx over UCX's shared-memory (sm) and tcp transports
(MORI_NET_TRANSPORT=ucx-all), on 2 to 8 PEs (PE_COUNTS).

One job per (transport, PEs) runs every case of tests/programs/transport_conformance.py after a
single init; each PE reports one JSON line per case, so a failure names its case. A PE killed
mid-run must be reported to the survivors, naming it, on every network transport."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import pytest

from harness import check_cases, collect, mori_run, pe_counts, python_program, start_env_ranks
from ucx_env import ucx_all, ucx_or_skip


@dataclass(frozen=True)
class Transport:
    name: str  # the transport every pair of distinct PEs must use
    env: dict = field(default_factory=dict)
    endpoint: str = ""  # what each such pair's endpoint description must match
    ucx: bool = False


TRANSPORTS = {
    "shm": Transport("shm", {}, r"^$"),
    "tcp": Transport("tcp", {"MORI_DISABLE_P2P": "1"}, r"^\d+\.\d+\.\d+\.\d+:\d+$"),
    # The endpoint's roles are UCX's own words: an am lane at least. Neither has an rma lane, so
    # RMA goes as MORI's requests over active messages (never UCX's software RMA: issue 29 item 2).
    "ucx-sm": Transport("ucx", ucx_all("sm"), r"^ucx \S+/memory: .*\bam\b.* \(RMA as MORI requests over am", ucx=True),
    "ucx-tcp": Transport("ucx", ucx_all("tcp"), r"^ucx tcp/lo: .*\bam\b.* \(RMA as MORI requests over am", ucx=True),
}
# The PE counts of each transport's jobs: a pair, odd and even rings (neighbours that are not
# mutual on 3), and for shm 8 (with MORI_TEST_ALL_PE_COUNTS=1: 13 s on CI's 2 cores), the most PEs
# a job on the 2-core CI machine runs. One job per row (every case after one init) keeps the suite
# inside CI's time: each row costs a job's start.
PE_COUNTS = {"shm": tuple(pe_counts(2, also=[8])), "tcp": (4,), "ucx-sm": (4,), "ucx-tcp": (3,)}
CASES = ["matrix", "endpoint", "threads", "rma", "atomics", "signal", "heap", "errors", "stress", "busy"]


@pytest.mark.parametrize("kind,n", [(kind, n) for kind, counts in PE_COUNTS.items() for n in counts])
def test_transport_conformance(kind, n):
    t = TRANSPORTS[kind]
    if t.ucx:
        ucx_or_skip()
    program = python_program("transport_conformance.py", t.name, "--endpoint", t.endpoint, "--stress", "4", "--busy")
    check_cases(mori_run(n, program, timeout=240, env=t.env), n, CASES)


@pytest.mark.parametrize("kind", ["tcp", "ucx-tcp"])
def test_killed_pe_is_reported(kind):
    """Ranks started straight from env vars (no launcher to stop the survivors): PE 2
    SIGKILLs itself mid-loop; PEs 0 and 1 fail fast with an error naming it."""
    t = TRANSPORTS[kind]
    if t.ucx:
        ucx_or_skip()
    procs = start_env_ranks(3, python_program("tcp_faults.py", "kill", "2"), {**t.env, "MORI_BOOTSTRAP_TIMEOUT": "30"})
    outs = collect(procs, timeout=60)
    assert procs[2].returncode == -9, outs[2]
    for rank in (0, 1):
        assert procs[rank].returncode == 3, outs[rank]
        m = re.search(r"caught (\w+) after ([\d.]+) s: (.*)", outs[rank])
        assert m, outs[rank]
        assert "PE 2" in m.group(3), f"the error does not name the dead PE: {m.group(0)}"
        assert float(m.group(2)) < 10, f"took {m.group(2)} s to notice"
