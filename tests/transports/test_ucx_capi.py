# SPDX-License-Identifier: MIT
"""The OpenSHMEM C API over the ucx transport: the programs of tests/capi/ built with
our oshcc, every pair of distinct PEs through UCX (MORI_NET_TRANSPORT=ucx-all) at 2
and 4 PEs, UCX's shared-memory and tcp transports. The heap and the programs'
symmetric globals are mapped with ucp_mem_map and reached by rkey. Between hosts:
test_between_hosts.py."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from harness import check, mori_run
from ucx_env import ucx_all, ucx_or_skip

PROGRAMS = ["rma", "amo", "sync", "coll", "legacy", "threads", "team_sync", "runahead"]


@pytest.fixture(scope="module")
def built(capi_build) -> Path:
    ucx_or_skip()
    return capi_build(PROGRAMS)


@pytest.mark.parametrize("name", PROGRAMS)
@pytest.mark.parametrize("n,tls", [(2, "sm"), (4, "tcp")])
def test_c_program_over_ucx(built, name, n, tls):
    seed = str(random.getrandbits(48))
    out = check(mori_run(n, [str(built / name), seed], timeout=120, env=ucx_all(tls)))
    assert f"{name}: OK on {n} PEs" in out, f"seed {seed}:\n{out[-3000:]}"
