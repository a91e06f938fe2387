#!/usr/bin/env bash
# Issue 28, round 5, on a many-core host (the H200 host's 16 cores): `mori bench umbp --distributed
# --hosts netns` with the values' checksums hashed on one core (MORI_COPY_THREADS=1: a reader's
# check after each read and an owner's commit, as before round 5) and on the hash team (the
# default), alternated in one sitting, ROUNDS runs each. Needs root (network namespaces); Mooncake
# Store rows where scripts/bench-umbp-setup.sh installed it. One run: 2-4 minutes.
#   scripts/bench-umbp-dist-ab.sh [OUT_DIR] [ROUNDS]
# JSON per run in OUT_DIR (default bench-results/umbp-dist-ab): one-core-<r>.json, team-<r>.json.
set -euo pipefail
out=${1:-bench-results/umbp-dist-ab}
rounds=${2:-2}
PY=${PYTHON:-python3}
mkdir -p "$out"
args=(bench umbp --distributed --hosts netns --sizes 64K,360K,2M,4.5M --batches 1,32,128 --max-buffer 640M
    --iters 50 --budget 0.5)
for r in $(seq 1 "$rounds"); do
    for side in one-core team; do
        echo "== $side $r $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)"
        if [ "$side" = one-core ]; then
            MORI_COPY_THREADS=1 $PY -m mori.apps.cli "${args[@]}" --json "$out/$side-$r.json"
        else
            $PY -m mori.apps.cli "${args[@]}" --json "$out/$side-$r.json"
        fi
    done
done
