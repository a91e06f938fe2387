#!/usr/bin/env bash
# Sets up MORI (scripts/setup.sh) and runs the whole test suite: multi-process jobs under
# `mori run`, `mpirun` (+ pytest-mpi) and torch; GPU tests skip without GPUs.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
source scripts/env.sh
PY=${PYTHON:-python3}
exec $PY -m pytest -q -ra --durations=25 --timeout=600 -p no:cacheprovider tests "$@"
