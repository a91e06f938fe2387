#!/usr/bin/env bash
# Issue 32 on a many-core host (the GPU machine's 16 cores): MORI-IO tcp against the socket and
# Mooncake TCP, the tree at BEFORE against this tree, alternated in one sitting (before, after,
# after, before, ...). Each tree is built into its own directory (scripts/before_after_builds.sh:
# pip install --target, CUDA off unless AB_CUDA=1) and run from it:
#   mori bench io --mori tcp --apis session --baselines $BASELINES --sizes $SIZES --batches $BATCHES
# On the GPU machine's image, source scripts/device_env.sh first (Mooncake and the build's
# libraries travel in .devdeps and .whl).
# Environment:
#   STEPS       build, run or both (default "build run")
#   BEFORE      the git revision of "before" (needs .git), or BEFORE_SRC a source tree of it
#   RUNS        alternations (default 3: six runs)
#   SIZES OPS BASELINES BATCHES REPEATS   the rows (defaults 8,4K,64K,256K,1M / write,read /
#               socket,mooncake-tcp / 1 / 1)
#   BASELINES_BEFORE  the baselines of "before" (default BASELINES): an older tree may not know
#               one (socket-serial came with issue 32); the summary takes it from "after"
# Output: $OUT (default bench-results/io-builds) gets before-N.json, after-N.json, the logs and
# summary.txt: per row and run, the fastest transfer (us) and its ratios to the socket, to the
# socket one message at a time and to Mooncake TCP, and the 8 B latency, before and after.
set -uo pipefail
OUT=${OUT:-bench-results/io-builds}
PY=${PYTHON:-python3}
STEPS=${STEPS:-build run}
BEFORE=${BEFORE:-HEAD~1}
RUNS=${RUNS:-3}
SIZES=${SIZES:-8,4K,64K,256K,1M}
OPS=${OPS:-write,read}
BASELINES=${BASELINES:-socket,mooncake-tcp}
BASELINES_BEFORE=${BASELINES_BEFORE:-$BASELINES}
BATCHES=${BATCHES:-1}
REPEATS=${REPEATS:-1}
cd "$(dirname "$0")/.."
ROOT=$PWD
source "$ROOT/scripts/before_after_builds.sh"
ab_begin gpu-io-builds

if ab_running; then
  for i in $(seq 1 "$RUNS"); do
    # before, after, then after, before: neither build always runs first in a pair.
    order="before after"
    [ $((i % 2)) -eq 0 ] && order="after before"
    for name in $order; do
      baselines=$BASELINES
      [ $name = before ] && baselines=$BASELINES_BEFORE
      ab_logged $name "$OUT/$name-$i.log" timeout 300 $PY -S -m mori.apps.cli bench io --mori tcp --apis session \
        --baselines "$baselines" --sizes "$SIZES" --ops "$OPS" --batches "$BATCHES" --repeats "$REPEATS" \
        --json "$OUT/$name-$i.json"
    done
  done
  grep -h "mori from" "$OUT"/before-1.log "$OUT"/after-1.log
  $PY -c 'import sys; sys.path.insert(0, sys.argv[3]); from before_after_rows import io_summary; print(io_summary(sys.argv[1], int(sys.argv[2])))' \
    "$OUT" "$RUNS" "$ROOT/scripts" > "$OUT/summary.txt"
  cat "$OUT/summary.txt"
fi
exit $rc
