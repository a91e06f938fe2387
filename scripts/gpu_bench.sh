#!/usr/bin/env bash
# One call on a GPU machine: build, then the steps named in STEPS (default all):
#   tests  the GPU tests (pytest; TESTS overrides which)
#   ep     `mori bench ep --gpu` for each launch shape in EP_SHAPES (block_num x warp_per_block),
#          then with the fp8_direct_cast combine, the zero-copy combine, and pipelined staging
#          (MORI_EP_COMBINE_STAGING=pipelined) for the external and fp8 combines
#   ccl    `mori bench ccl --gpu` (all-gather sweep, other collectives, GEMM overlap)
#   io     `mori bench io --gpu` (MORI-IO on GPU memory between two processes vs a device copy)
#   umbp   `mori bench umbp` on the host's cores (MORI-UMBP vs memcpy, raw reads and Mooncake Store)
# Logs and JSON go to $OUT/results.tgz (default OUT: bench-results/), a summary to stdout.
# Tests and benchmarks use every GPU of the node. On 8 GPUs the whole script outlasts a
# 10-minute call: run `STEPS=tests` and `STEPS="ep ccl"` as two calls.
# NVLink multicast stays off.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
OUT=${OUT:-bench-results}
PY=${PYTHON:-python3}
STEPS=${STEPS:-tests ep ccl io umbp}
EP_SHAPES=${EP_SHAPES:-264x16}
TESTS=${TESTS:-tests/ep/test_ep_gpu_op.py tests/collectives/test_ccl_gpu.py tests/gpu tests/io/test_io_gpu.py tests/umbp/test_local_gpu.py}
mkdir -p "$OUT"
RES=$(mktemp -d)
trap 'tar czf "$OUT/results.tgz" -C "$RES" .' EXIT
cd "$(dirname "$0")/.."
{ date -u; nvidia-smi --query-gpu=index,name,driver_version --format=csv; } > "$RES/machine.txt" 2>&1
rc=0
step() {  # name, command...: run, keep the log, remember failures
  local name=$1 start=$SECONDS
  shift
  "$@" > "$RES/$name.log" 2>&1
  local r=$?
  echo "== $name: exit $r, $((SECONDS - start)) s"
  [ $r -eq 0 ] || { rc=1; tail -25 "$RES/$name.log"; }
  return $r
}
step build env CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" $PY -m pip install --no-build-isolation --no-deps -e . || exit 1
for s in $STEPS; do
  case $s in
    tests)
      step tests timeout 600 $PY -m pytest -q -rfEs -p no:cacheprovider $TESTS
      tail -3 "$RES/tests.log" ;;
    ep)
      for shape in $EP_SHAPES; do
        step "ep-$shape" timeout 300 $PY -m mori.apps.cli bench ep --gpu --block-num "${shape%x*}" \
          --warp-per-block "${shape#*x}" --json "$RES/ep-$shape.json" && tail -12 "$RES/ep-$shape.log"
      done
      shape=${EP_SHAPES%% *}
      # name, MORI_EP_COMBINE_STAGING, extra arguments
      for variant in "fp8cast bulk --quant fp8_direct_cast" "zerocopy bulk --zero-copy" "pipelined pipelined" \
                     "fp8cast-pipelined pipelined --quant fp8_direct_cast"; do
        set -- $variant
        name=ep-$1 staging=$2
        shift 2
        step "$name" env MORI_EP_COMBINE_STAGING=$staging timeout 300 $PY -m mori.apps.cli bench ep --gpu "$@" \
          --block-num "${shape%x*}" --warp-per-block "${shape#*x}" --json "$RES/$name.json" && tail -12 "$RES/$name.log"
      done ;;
    ccl)
      step ccl timeout 400 $PY -m mori.apps.cli bench ccl --gpu --json "$RES/ccl.json" && tail -40 "$RES/ccl.log" ;;
    io)
      step io timeout 300 $PY -m mori.apps.cli bench io --gpu --json "$RES/io-gpu.json" && tail -25 "$RES/io.log" ;;
    umbp)
      step umbp timeout 400 $PY -m mori.apps.cli bench umbp --ssd-dir "${UMBP_BENCH_DIR:-/tmp}" \
        --json "$RES/umbp.json" && tail -70 "$RES/umbp.log" ;;
  esac
done
exit $rc
