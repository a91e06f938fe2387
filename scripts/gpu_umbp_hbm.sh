#!/usr/bin/env bash
# UMBP's HBM pages (distributed pool) on a GPU machine: the GPU cases of
# tests/umbp/distributed/test_dist_hbm.py (a master and two worker processes on one GPU: puts
# from host memory and CUDA tensors into an owner's HBM pages, gets into both, the HBM tier at
# the master, HBM full -> DRAM, eviction, the owner killed mid-read, a bad device), then the rest
# of the file. Build first (the lead's: python3 -m pip install --no-build-isolation -e .).
# Log and JUnit XML go to $OUT (default bench-results/): umbp_hbm.log, umbp_hbm.xml.
#   bash scripts/gpu_umbp_hbm.sh
set -uo pipefail
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
OUT=${OUT:-bench-results}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
cd "$(dirname "$0")/.."
[ -f scripts/env.sh ] && source scripts/env.sh
{ date -u; nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv 2>&1;
  $PY -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())" 2>&1; } \
  | tee "$OUT/umbp_hbm.log"
# -rs: the skip reasons are listed (a GPU case that skipped here is a failure of this run).
$PY -m pytest -x -q -rs -p no:cacheprovider --timeout=300 --junitxml="$OUT/umbp_hbm.xml" \
  tests/umbp/distributed/test_dist_hbm.py 2>&1 | tee -a "$OUT/umbp_hbm.log"
rc=${PIPESTATUS[0]}
echo "pytest rc=$rc" | tee -a "$OUT/umbp_hbm.log"
exit "$rc"
