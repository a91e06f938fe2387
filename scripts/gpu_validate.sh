#!/usr/bin/env bash
# Every GPU test of the repository in one run on a machine with 2 NVLink-connected GPUs:
# build, then the GPU heap / device API tests, the GPU collectives and MORI-EP on CUDA.
# Logs go to $OUT (default bench-results/). NVLink multicast stays off.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
OUT=${OUT:-bench-results}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=index,name,driver_version --format=csv > "$OUT/machine.txt" 2>&1
start=$(date +%s)
if ! CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) $PY -m pip install -q --no-build-isolation --no-deps -e . > "$OUT/build.log" 2>&1; then
  tail -40 "$OUT/build.log"; echo "BUILD FAILED"; exit 1
fi
echo "build: $(( $(date +%s) - start )) s"
start=$(date +%s)
timeout ${GPU_TEST_TIMEOUT:-420} $PY -m pytest -q -rs -p no:cacheprovider tests/gpu tests/collectives/test_ccl_gpu.py \
  tests/ep/test_ep_gpu.py tests/ep/test_ep_gpu_op.py 2>&1 | tee "$OUT/gpu_tests.log" | tail -30
rc=${PIPESTATUS[0]}
echo "gpu tests: $(( $(date +%s) - start )) s, exit code $rc"
exit $rc
