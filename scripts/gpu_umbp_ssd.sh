#!/usr/bin/env bash
# Issue 27 on the H200 host's cores: single-value SSD hits, the tree at BEFORE against this tree,
# alternated. Each tree is built into its own directory (pip install --target, CUDA off, under
# build/, which later calls on the same machine keep) and run from it:
#   mori bench umbp --modes local --tiers ssd --batches 1 --no-mooncake    (before, after) x RUNS
#   tests/umbp/ssd_tier_microbench.py --single --backend posix             (before, after)
# The bench alternates the raw read and the get call by call in one process (this tree's bench code
# runs in both builds); the microbench shows where a single get's time goes (raw read, get, the
# call's fixed cost, the checksum).
# Both builds run with `python -S` and the interpreter's site-packages on PYTHONPATH; the runs
# refuse to start where a mori is installed for the interpreter (the processes a benchmark starts
# would import it); each log's first line says which mori ran.
# Environment:
#   STEPS       build, run or both (default "build run"; a 10-minute call may need two)
#   BEFORE      the git revision of "before" (default 26bcc36, main before this work); needs .git
#   BEFORE_SRC  a source tree to use as "before" instead (no git needed)
#   RUNS        alternations (default 3)
#   SSD_DIR     where the tier and raw files go (default: the system temporary directory)
# Output: $OUT (default bench-results/) gets before-N.json, after-N.json, the logs and summary.txt.
set -uo pipefail
OUT=${OUT:-bench-results}
PY=${PYTHON:-python3}
STEPS=${STEPS:-build run}
BEFORE=${BEFORE:-26bcc36}
RUNS=${RUNS:-3}
SSD_DIR=${SSD_DIR:-${TMPDIR:-/tmp}}
cd "$(dirname "$0")/.."
ROOT=$PWD
source "$ROOT/scripts/before_after_builds.sh"
ab_begin gpu-umbp-ssd
if [[ " $STEPS " == *" build "* ]]; then
  # One bench method for both: this tree's SSD rows (the raw read alternated with the get call by
  # call) run against the before build's store (the bench uses only the public API).
  cp apps/bench/umbp.py apps/bench/umbp_workload.py "$PREFIX/before/mori/apps/bench/"
fi

if ab_running; then
  { df -T "$SSD_DIR" | tail -1; lsblk -o NAME,SIZE,ROTA,TYPE,MOUNTPOINT 2>/dev/null; } >> "$OUT/machine.txt" 2>&1
  # Each build runs with `python -S` (ab_run_in says why); a line of each log says which mori ran.
  for i in $(seq 1 "$RUNS"); do
    for name in before after; do
      ab_logged $name "$OUT/$name-$i.log" timeout 300 $PY -S -m mori.apps.cli bench umbp --modes local --tiers ssd \
        --batches 1 --no-mooncake --ssd-dir "$SSD_DIR" --json "$OUT/$name-$i.json"
    done
  done
  for name in before after; do
    ab_logged $name "$OUT/single-$name.txt" timeout 200 $PY -S "$ROOT/tests/umbp/ssd_tier_microbench.py" --single \
      --backend posix --iters 200 "$SSD_DIR"
  done
  grep -h "mori from" "$OUT"/before-1.log "$OUT"/after-1.log
  # The single-value rows of every run side by side: GiB/s of the tier's get and of the raw read
  # in the same run, and their ratio (the target: >= 0.8).
  $PY - "$OUT" "$RUNS" "$ROOT/scripts" > "$OUT/summary.txt" <<'EOF'
import sys
sys.path.insert(0, sys.argv[3])
from before_after_rows import runs
print("value    run  before: get raw x-raw   after: get raw x-raw  (GiB/s of the median call)")
for i, by_name in runs(sys.argv[1], int(sys.argv[2])):
    fig = {}
    for name, rows in by_name.items():
        for r in rows:
            if r.get("op") == "get" and r.get("tier") == "ssd" and r.get("batch") == 1:
                fig.setdefault(r["value"], {}).setdefault(name, {})[r["engine"]] = r.get("GiB/s")
    for value, by in fig.items():
        cells = []
        for name in ("before", "after"):
            g, w = by.get(name, {}).get("umbp"), by.get(name, {}).get("raw read")
            cells.append(f"{g or 0:6.2f} {w or 0:5.2f} {g / w if g and w else 0:5.2f}")
        print(f"{value:>8} {i:4d}  {cells[0]}      {cells[1]}")
EOF
  cat "$OUT/summary.txt" "$OUT/single-before.txt" "$OUT/single-after.txt"
fi
exit $rc
