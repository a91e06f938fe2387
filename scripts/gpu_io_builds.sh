#!/usr/bin/env bash
# Issue 32 on a many-core host (the GPU machine's 16 cores): MORI-IO tcp against the socket and
# Mooncake TCP, the tree at BEFORE against this tree, alternated in one sitting (before, after,
# after, before, ...). Each tree is built into its own directory (scripts/before_after_builds.sh:
# pip install --target, CUDA off) and run from it:
#   mori bench io --mori tcp --apis session --baselines $BASELINES --sizes $SIZES --batches 1
# On the GPU machine's image, source scripts/device_env.sh first (Mooncake and the build's
# libraries travel in .devdeps and .whl).
# Environment:
#   STEPS       build, run or both (default "build run")
#   BEFORE      the git revision of "before" (needs .git), or BEFORE_SRC a source tree of it
#   RUNS        alternations (default 3: six runs)
#   SIZES OPS BASELINES   the rows (defaults 8,4K,64K,256K,1M / write,read / socket,mooncake-tcp)
# Output: $OUT (default bench-results/io-builds) gets before-N.json, after-N.json, the logs and
# summary.txt: per row and run, the fastest transfer (us) and its ratio to the socket and to
# Mooncake TCP, before and after.
set -uo pipefail
OUT=${OUT:-bench-results/io-builds}
PY=${PYTHON:-python3}
STEPS=${STEPS:-build run}
BEFORE=${BEFORE:-HEAD~1}
RUNS=${RUNS:-3}
SIZES=${SIZES:-8,4K,64K,256K,1M}
OPS=${OPS:-write,read}
BASELINES=${BASELINES:-socket,mooncake-tcp}
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
      ab_logged $name "$OUT/$name-$i.log" timeout 300 $PY -S -m mori.apps.cli bench io --mori tcp --apis session \
        --baselines "$BASELINES" --sizes "$SIZES" --ops "$OPS" --batches 1 --json "$OUT/$name-$i.json"
    done
  done
  grep -h "mori from" "$OUT"/before-1.log "$OUT"/after-1.log
  $PY - "$OUT" "$RUNS" "$ROOT/scripts" > "$OUT/summary.txt" <<'EOF'
import sys
sys.path.insert(0, sys.argv[3])
from before_after_rows import runs
print("row               run   before: us  x socket  x mooncake    after: us  x socket  x mooncake")
for i, by_name in runs(sys.argv[1], int(sys.argv[2])):
    fig = {}
    for name, rows in by_name.items():
        for r in rows:
            if r.get("engine") == "mori-tcp" and r.get("BatchSize") == 1:
                key = f'{r["op"]} {r["MsgSize (B)"]}'
                fig.setdefault(key, {})[name] = (r.get("Min Lat (us)"), r.get("x socket"), r.get("x mooncake"))
    for key, by in fig.items():
        cells = []
        for name in ("before", "after"):
            us, sock, mc = by.get(name, (None, None, None))
            cells.append(f"{us or 0:12.1f} {sock or 0:9.2f} {mc or 0:11.2f}")
        print(f"{key:>16} {i:4d}  {cells[0]}    {cells[1]}")
EOF
  cat "$OUT/summary.txt"
fi
exit $rc
