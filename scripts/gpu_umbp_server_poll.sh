#!/usr/bin/env bash
# Issue 27 on a many-core host (the GPU machine's CPUs): SSD hits through the per-host server
# from 4 ranks, with a setting of the server path off and on, alternated in one sitting:
#   mori bench umbp --modes server --tiers ssd --batches 1 --no-mooncake     (per value) x RUNS
# The bench times the raw read beside each get, so every row is a ratio to it (x raw read).
# Run it from an installed tree (python3 -m pip install --no-build-isolation -e . first).
# Environment:
#   SETTING  the variable compared (default UMBP_SERVER_POLL_US; e.g. UMBP_SERVER_DIRECT_READS)
#   WINDOWS  its values, in the order run (default "0 250 0 250")
#   SIZES    value sizes (default 64K,360K)
#   BATCHES  batch sizes (default 1)
#   ITERS    timed calls per row (default 200)
#   SSD_DIR  where the tier and raw files go (default: build/ssd)
# Output: $OUT (default bench-results/) gets <tag>-<value>-<n>.json (tag: poll for
# UMBP_SERVER_POLL_US, else the setting's name in lower case), their logs and summary.txt.
set -uo pipefail
OUT=${OUT:-bench-results}
PY=${PYTHON:-python3}
SETTING=${SETTING:-UMBP_SERVER_POLL_US}
WINDOWS=${WINDOWS:-0 250 0 250}
SIZES=${SIZES:-64K,360K}
BATCHES=${BATCHES:-1}
TAG=poll
[ "$SETTING" = UMBP_SERVER_POLL_US ] || TAG=$(echo "$SETTING" | tr 'A-Z' 'a-z')
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
  env "$SETTING=$us" timeout 300 $PY -m mori.apps.cli bench umbp --modes server --tiers ssd --sizes "$SIZES" \
    --batches "$BATCHES" --no-mooncake --ssd-dir "$SSD_DIR" --iters "$ITERS" --budget 1 --json "$OUT/$TAG-$us-$n.json" \
    > "$OUT/$TAG-$us-$n.log" 2>&1 || rc=1
  echo "== $SETTING=$us run $n: exit $?"
done
$PY - "$OUT" "$TAG" <<'PY' | tee "$OUT/summary.txt"
import glob, json, sys
for f in sorted(glob.glob(f"{sys.argv[1]}/{sys.argv[2]}-*.json")):
    rows = json.load(open(f))["rows"]
    cells = [f"{r['value']} x{r['batch']}: {r['x raw read']:.2f}" for r in rows
             if r["engine"] == "umbp" and r["op"] == "get" and r.get("x raw read")]
    print(f.rsplit("/", 1)[1], "x raw read:", ", ".join(cells))
PY
exit "$rc"
