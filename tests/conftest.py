# SPDX-License-Identifier: MIT
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

# One OpenMP thread per process (as torchrun sets it for several processes per node): the jobs
# put up to 8 PEs on the CI machine's 2 cores, and torch's intra-op threads of each PE spin while
# waiting for the others, several times a job's CPU time (8 PEs of ep_shared_input.py: 118 s of
# CPU -> 31 s). Set before any test imports torch, and inherited by every process the tests
# start. A value already in the environment is kept.
os.environ.setdefault("OMP_NUM_THREADS", "1")
