# SPDX-License-Identifier: MIT
"""The OpenSHMEM C API between hosts: the programs of tests/capi/ built with our oshcc and run
as 2 hosts x 2 PEs (network namespaces joined by veth, one `mori run --nnodes 2` per host).
Heap and symmetric globals of the other host are reached over the tcp transport."""
from __future__ import annotations

import random
from pathlib import Path

import pytest

from harness import build_capi_programs
from multihost import check_all, run_on_hosts, veth_hosts_or_skip

pytestmark = pytest.mark.netns

PROGRAMS = ["rma", "amo", "sync", "coll", "legacy", "threads", "runahead"]


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    return build_capi_programs(PROGRAMS, tmp_path_factory.mktemp("tcp_capi"))


@pytest.fixture
def hosts():
    vh = veth_hosts_or_skip()
    try:
        yield vh.hosts
    finally:
        vh.destroy()


@pytest.mark.parametrize("name", PROGRAMS)
def test_c_program_two_hosts(built, hosts, name):
    seed = str(random.getrandbits(48))
    out = check_all(run_on_hosts(hosts, 2, [str(built / name), seed], timeout=120))
    assert f"{name}: OK on 4 PEs" in out, f"seed {seed}:\n{out[-3000:]}"
