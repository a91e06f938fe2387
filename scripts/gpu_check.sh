#!/usr/bin/env bash
# Build MORI with CUDA, run the GPU tests and the GPU shmem benchmark, in one go, on a
# machine with at least 2 NVLink-connected GPUs. Logs and JSON go to $OUT (default
# bench-results/). NVLink multicast stays off (shared GPU hosts).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
OUT=${OUT:-bench-results}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
cd "$(dirname "$0")/.."

{ date -u; nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv; nvidia-smi topo -m; } \
  > "$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"

start=$(date +%s)
if ! CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) $PY -m pip install --no-build-isolation --no-deps -e . > "$OUT/build.log" 2>&1; then
  tail -60 "$OUT/build.log"
  echo "BUILD FAILED"
  exit 1
fi
echo "build: $(( $(date +%s) - start )) s"

start=$(date +%s)
$PY -m pytest tests/gpu -v -rs -p no:cacheprovider 2>&1 | tee "$OUT/tests.log" | tail -40
tests_rc=${PIPESTATUS[0]}
echo "tests: $(( $(date +%s) - start )) s, exit code $tests_rc"

start=$(date +%s)
$PY -m mori.apps.bench.shmem_gpu --json "$OUT/shmem_gpu.json" 2>&1 | tee "$OUT/bench.log"
bench_rc=${PIPESTATUS[0]}
echo "bench: $(( $(date +%s) - start )) s, exit code $bench_rc"
exit $(( tests_rc != 0 || bench_rc != 0 ))
