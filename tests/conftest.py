# SPDX-License-Identifier: MIT
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

# One OpenMP thread per process (as torchrun sets it for several processes per node): the jobs
# put up to 8 PEs on the CI machine's 2 cores, and torch's intra-op threads of each PE spin while
# waiting for the others, several times a job's CPU time (8 PEs of ep_shared_input.py: 118 s of
# CPU -> 31 s). Set before any test imports torch, and inherited by every process the tests
# start. A value already in the environment is kept.
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(scope="session")
def capi_build(tmp_path_factory):
    """``capi_build(names) -> dir``: tests/capi/NAME.c built with our oshcc, each program once per
    session however many test files run it (the C API's, ucx's and the between-hosts tests)."""
    from harness import build_capi_programs

    out = tmp_path_factory.mktemp("capi")
    built: set[str] = set()

    def build(names):
        missing = [n for n in names if n not in built]
        build_capi_programs(missing, out)
        built.update(missing)
        return out

    return build
