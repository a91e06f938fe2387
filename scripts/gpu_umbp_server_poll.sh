#!/usr/bin/env bash
# Issue 27 on a many-core host (the GPU machine's CPUs): SSD hits of single values through the
# per-host server from 4 ranks, with UMBP_SERVER_POLL_US off and on, alternated in one sitting:
#   mori bench umbp --modes server --tiers ssd --batches 1 --no-mooncake     (per setting) x RUNS
# The bench times the raw read beside each get, so every row is a ratio to it (x raw read).
# Run it from an installed tree (python3 -m pip install --no-build-isolation -e . first).
# Environment:
#   WINDOWS  the UMBP_SERVER_POLL_US values, in the order run (default "0 250 0 250")
#   SIZES    value sizes (default 64K,360K)
#   ITERS    timed calls per row (default 200)
#   SSD_DIR  where the tier and raw files go (default: build/ssd)
# Output: $OUT (default bench-results/) gets poll-<us>-<n>.json, their logs and summary.txt.
set -uo pipefail
OUT=${OUT:-bench-results}
PY=${PYTHON:-python3}
WINDOWS=${WINDOWS:-0 250 0 250}
SIZES=${SIZES:-64K,360K}
ITERS=${ITERS:-200}
cd "$(dirname "$0")/.."
SSD_DIR=${SSD_DIR:-$PWD/build/ssd}
mkdir -p "$OUT" "$SSD_DIR"
OUT=$(cd "$OUT" && pwd)
[ -f scripts/env.sh ] && source scripts/env.sh
rc=0
n=0
for us in $WINDOWS; do
  n=$((n + 1))
  UMBP_SERVER_POLL_US=$us timeout 300 $PY -m mori.apps.cli bench umbp --modes server --tiers ssd --sizes "$SIZES" \
    --batches 1 --no-mooncake --ssd-dir "$SSD_DIR" --iters "$ITERS" --budget 1 --json "$OUT/poll-$us-$n.json" \
    > "$OUT/poll-$us-$n.log" 2>&1 || rc=1
  echo "== UMBP_SERVER_POLL_US=$us run $n: exit $?"
done
$PY - "$OUT" <<'PY' | tee "$OUT/summary.txt"
import glob, json, sys
for f in sorted(glob.glob(sys.argv[1] + "/poll-*.json")):
    rows = json.load(open(f))["rows"]
    cells = [f"{r['value']}: {r['x raw read']:.2f}" for r in rows
             if r["engine"] == "umbp" and r["op"] == "get" and r.get("x raw read")]
    print(f.rsplit("/", 1)[1], "x raw read:", ", ".join(cells))
PY
exit "$rc"
