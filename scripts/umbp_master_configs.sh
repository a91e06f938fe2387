#!/usr/bin/env bash
# The UMBP master's cost per call under several settings, alternated in one sitting: for each
# round, each config runs `mori bench umbp --master` over BACKENDS x BATCHES with CLIENTS client
# processes, and a summary gives master CPU us/call, calls per master core-second, calls/s and
# p50/p99 per row, config by config.
# Environment:
#   CONFIGS   space-separated NAME=SETTINGS, SETTINGS a comma-separated list of VAR=VALUE (may
#             be empty). Default: "unary-2=UMBP_MASTER_THREADS=2,UMBP_MASTER_HANDLER_THREADS=0,
#             UMBP_GRPC_STREAMS=0 default=" (the server and client before call streams, and now)
#   ROUNDS    alternations (default 2); BACKENDS (memory,redis); BATCHES (0 128); CLIENTS (4);
#   ROW_SECONDS  timed seconds per row (3; not SECONDS, which bash keeps as its own clock);
#   PYTHON (python3); OUT (bench-results/umbp-master-configs)
# Output: $OUT/NAME-ROUND-bBATCH.json and $OUT/summary.txt.
set -uo pipefail
CONFIGS=${CONFIGS:-"unary-2=UMBP_MASTER_THREADS=2,UMBP_MASTER_HANDLER_THREADS=0,UMBP_GRPC_STREAMS=0 default="}
ROUNDS=${ROUNDS:-2}
BACKENDS=${BACKENDS:-memory,redis}
BATCHES=${BATCHES:-0 128}
CLIENTS=${CLIENTS:-4}
SECONDS_PER_ROW=${ROW_SECONDS:-3}
PY=${PYTHON:-python3}
OUT=${OUT:-bench-results/umbp-master-configs}
mkdir -p "$OUT"
rc=0
{ date -u; nproc; uptime; } > "$OUT/machine.txt" 2>&1
for round in $(seq 1 "$ROUNDS"); do
  for config in $CONFIGS; do
    name=${config%%=*}
    settings=${config#*=}
    for batch in $BATCHES; do
      # shellcheck disable=SC2086 # the settings are words for env on purpose
      env ${settings//,/ } timeout 600 $PY -m mori.apps.cli bench umbp --master --backends "$BACKENDS" --batch "$batch" \
        --clients "$CLIENTS" --seconds "$SECONDS_PER_ROW" --json "$OUT/$name-$round-b$batch.json" \
        > "$OUT/$name-$round-b$batch.log" 2>&1 || { rc=1; echo "== $name round $round batch $batch failed"; tail -5 "$OUT/$name-$round-b$batch.log"; }
    done
  done
done
$PY - "$OUT" "$CONFIGS" > "$OUT/summary.txt" <<'EOF'
import glob, json, os, sys
out, configs = sys.argv[1], [c.split("=", 1)[0] for c in sys.argv[2].split()]
print(f"{'config':>12} {'round':>5} {'backend':>8} {'batch':>5} {'clients':>7} {'us/call':>8} {'per core':>9} {'calls/s':>8} {'p50 us':>7} {'p99 us':>7}")
for name in configs:
    for path in sorted(glob.glob(f"{out}/{name}-*-b*.json")):
        rnd, batch = os.path.basename(path)[len(name) + 1 : -5].split("-b")
        for r in json.load(open(path))["rows"]:
            cpu, per_core = r["master_cpu_us_per_call"], r["calls_per_master_core_s"]
            cpu = "-" if cpu is None else f"{cpu:.1f}"
            per_core = "-" if per_core is None else f"{per_core:.0f}"
            print(f"{name:>12} {rnd:>5} {r['backend']:>8} {batch:>5} {r['clients']:>7} {cpu:>8} "
                  f"{per_core:>9} {r['calls_per_s']:8.0f} {r['p50_us']:7.0f} {r['p99_us']:7.0f}")
EOF
cat "$OUT/summary.txt"
exit $rc
