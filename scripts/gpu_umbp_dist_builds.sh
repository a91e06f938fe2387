#!/usr/bin/env bash
# Issue 28 on a many-core host (the GPU machine's 16 cores): located reads between two network
# namespaces, the tree at BEFORE against this tree, alternated in one sitting. Each tree is built
# into its own directory (pip install --target, CUDA off, under build/, which later calls on the
# same machine keep) and run from it:
#   mori bench umbp --distributed --hosts netns --sizes $SIZES --batches $BATCHES   (before, after) x RUNS
#   MORI_IO_DIRECT=0 scripts/umbp_located_read_cost.py --shapes $SHAPES              (before, after) x RUNS
# The bench gives get x raw MORI-IO tcp and x Mooncake Store (where scripts/bench-umbp-setup.sh
# installed it); the probe splits a get into the located read, the serial hash and the raw read
# of the same bytes. Needs root (network namespaces) and, on the GPU machine's image, what
# scripts/device_carry.sh gathers (its header gives the CMAKE_ARGS and paths to export first).
# Both builds run with `python -S` and the interpreter's site-packages on PYTHONPATH; the runs
# refuse to start where a mori is installed for the interpreter (the processes a benchmark starts
# would import it); each log's first line says which mori ran.
# Environment:
#   STEPS       build, run or both (default "build run"; a 10-minute call may need two)
#   BEFORE      the git revision of "before" (default 83e973c: arrival checksums hashed under the
#               chunk's lock); needs .git
#   BEFORE_SRC  a source tree to use as "before" instead (no git needed)
#   RUNS        alternations (default 3)
#   SIZES BATCHES SHAPES ITERS   the rows (defaults 64K,360K,2M / 1,32 / 64Kx1,360Kx1,2Mx1 / 100)
# Output: $OUT (default bench-results/umbp-dist-builds) gets before-N.json, after-N.json, the
# probes' output, the logs and summary.txt.
set -uo pipefail
OUT=${OUT:-bench-results/umbp-dist-builds}
PY=${PYTHON:-python3}
STEPS=${STEPS:-build run}
BEFORE=${BEFORE:-83e973c}
RUNS=${RUNS:-3}
SIZES=${SIZES:-64K,360K,2M}
BATCHES=${BATCHES:-1,32}
SHAPES=${SHAPES:-64Kx1,360Kx1,2Mx1}
ITERS=${ITERS:-100}
cd "$(dirname "$0")/.."
ROOT=$PWD
source "$ROOT/scripts/before_after_builds.sh"
ab_begin gpu-umbp-dist

if ab_running; then
  for i in $(seq 1 "$RUNS"); do
    for name in before after; do
      ab_logged $name "$OUT/$name-$i.log" timeout 400 $PY -S -m mori.apps.cli bench umbp --distributed --hosts netns \
        --sizes "$SIZES" --batches "$BATCHES" --iters "$ITERS" --budget 0.4 --json "$OUT/$name-$i.json"
      ab_run_in $name env MORI_IO_DIRECT=0 timeout 200 $PY -S "$ROOT/scripts/umbp_located_read_cost.py" --calls 300 \
        --shapes "$SHAPES" > "$OUT/probe-$name-$i.txt" 2>&1 || rc=1
    done
  done
  grep -h "mori from" "$OUT"/before-1.log "$OUT"/after-1.log
  # Every run's get rows side by side: x raw MORI-IO tcp and x Mooncake Store (the targets:
  # >= 0.85 and >= 2), and the probes.
  $PY - "$OUT" "$RUNS" "$ROOT/scripts" > "$OUT/summary.txt" <<'EOF'
import sys
sys.path.insert(0, sys.argv[3])
from before_after_rows import runs
print("row              run   before: x raw  x mooncake    after: x raw  x mooncake")
for i, by_name in runs(sys.argv[1], int(sys.argv[2])):
    fig = {}
    for name, rows in by_name.items():
        for r in rows:
            if r.get("engine") == "umbp" and r.get("op") == "get":
                key = f'{r["value"]} x {r["batch"]}'
                fig.setdefault(key, {})[name] = (r.get("x raw-io"), r.get("x mooncake"))
    for key, by in fig.items():
        cells = []
        for name in ("before", "after"):
            raw, mc = by.get(name, (None, None))
            cells.append(f"{raw or 0:12.2f} {mc or 0:11.2f}")
        print(f"{key:>16} {i:4d}  {cells[0]}    {cells[1]}")
EOF
  cat "$OUT/summary.txt"
  for f in "$OUT"/probe-*.txt; do echo "== $(basename "$f")"; grep KiB "$f"; done
fi
exit $rc
