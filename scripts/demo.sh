#!/usr/bin/env bash
# Sets up MORI and runs the main CPU job: a 4-process shmem job (`mori info`, the shmem
# correctness suite) and the shmem benchmark against mpi4py RMA and memcpy.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
source scripts/env.sh
PY=${PYTHON:-python3}
MORI="$PY -m mori.apps.cli"  # the `mori` command, also where the interpreter's scripts are not on PATH
$MORI run -n 4 $MORI info
$MORI run -n 4 $PY tests/programs/shmem_suite.py --quick
$MORI bench shmem --json bench-results/shmem.json
