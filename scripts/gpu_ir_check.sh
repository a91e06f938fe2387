#!/usr/bin/env bash
# MORI-IR on a GPU machine: build MORI, run the MORI-IR tests (Triton kernels calling the shmem
# device API and the CUDA C++ all-reduces, 2 and 4 PEs sharing one GPU unless MORI_TEST_GPU_PES
# says otherwise), and `mori bench ir` (Triton put, put+signal, ring and one-shot all-reduce vs
# CUDA C++ over device.cuh and NCCL; MORI_IR_BENCH_PES PEs, default 2). Logs and JSON go to
# $OUT (default bench-results/): ir_tests.xml (JUnit), ir_bench.json, ir_summary.json.
# One H200, already built, in about 3-4 minutes:
#   MORI_IR_SKIP_BUILD=1 MORI_TEST_GPU_PES=2 bash scripts/gpu_ir_check.sh
# The bitcode: MORI_IR_BITCODE, else build/ir-bitcode/*.bc
# (carried from a machine with clang: python -m mori.ir.build --arch sm_90 --out build/ir-bitcode),
# else whatever the build installed. MORI_IR_SKIP_BUILD=1 skips the build (done by an earlier
# call, e.g. scripts/gpu_check.sh). NVLink multicast stays off (shared GPU hosts).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
OUT=${OUT:-bench-results}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
cd "$(dirname "$0")/.."

{ date -u; nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv;
  $PY -c "import triton, torch; print('triton', triton.__version__, 'torch', torch.__version__)"; } \
  > "$OUT/ir_machine.txt" 2>&1
cat "$OUT/ir_machine.txt"

start=$(date +%s)
if [ "${MORI_IR_SKIP_BUILD:-0}" = 1 ]; then
  echo "build: skipped (MORI_IR_SKIP_BUILD=1)"
elif ! CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) $PY -m pip install --no-build-isolation --no-deps -e . > "$OUT/ir_build.log" 2>&1; then
  tail -60 "$OUT/ir_build.log"
  echo "BUILD FAILED"
  exit 1
else
  echo "build: $(( $(date +%s) - start )) s"
fi

if [ -z "${MORI_IR_BITCODE:-}" ]; then
  carried=$(ls build/ir-bitcode/libmori_shmem_device_sm_*.bc 2>/dev/null | head -1)
  [ -n "$carried" ] && export MORI_IR_BITCODE=$PWD/$carried
fi
$PY -c "from mori.ir import find_bitcode; print('bitcode:', find_bitcode())" 2>&1 | tee -a "$OUT/ir_machine.txt"

export MORI_TEST_GPU_PES=${MORI_TEST_GPU_PES:-2,4}
start=$(date +%s)
timeout 240 $PY -m pytest tests/gpu/test_ir.py -v -rs -p no:cacheprovider \
  --junitxml="$OUT/ir_tests.xml" 2>&1 | tee "$OUT/ir_tests.log" | tail -30
tests_rc=${PIPESTATUS[0]}
tests_s=$(( $(date +%s) - start ))
echo "tests: $tests_s s, exit code $tests_rc"

start=$(date +%s)
timeout 300 $PY -m mori.apps.cli bench ir --pes "${MORI_IR_BENCH_PES:-2}" --json "$OUT/ir_bench.json" \
  --max-size $(( ${MORI_IR_BENCH_MIB:-256} << 20 )) 2>&1 | tee "$OUT/ir_bench.log" | grep -vE "BENCH \{" | tail -60
bench_rc=${PIPESTATUS[0]}
bench_s=$(( $(date +%s) - start ))
echo "bench: $bench_s s, exit code $bench_rc"
printf '{"tests_rc": %d, "tests_s": %d, "bench_rc": %d, "bench_s": %d, "gpu_pes": "%s"}\n' \
  "$tests_rc" "$tests_s" "$bench_rc" "$bench_s" "$MORI_TEST_GPU_PES" > "$OUT/ir_summary.json"
exit $(( tests_rc != 0 || bench_rc != 0 ))
