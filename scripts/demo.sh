#!/usr/bin/env bash
# Sets up MORI and runs the main CPU job: a 4-process shmem job (`mori info`, the shmem
# correctness suite) and the shmem benchmark against mpi4py RMA and memcpy.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
source scripts/env.sh
mori run -n 4 mori info
mori run -n 4 python tests/programs/shmem_suite.py --quick
mori bench shmem --json bench-results/shmem.json
