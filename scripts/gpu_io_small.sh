#!/usr/bin/env bash
# Issue 32, MORI-IO tcp against the socket and Mooncake TCP: MORI_IO_TCP_POLL_US off (0) and on
# (auto: 50 us where the process may run on 8 or more CPUs, so on for the GPU host's 16 cores),
# alternated in one sitting. Builds nothing: run it from the repo root of the installed tree,
# with the python that has the package and Mooncake (PYTHON, default python3).
#   ORDER  the runs, in order (default "off on on off off on"); a run is off, on, on64k or
#          on128k (on, with MORI_IO_TCP_CHUNK=64K or 128K: striped over both lanes from 128 or
#          256 KiB), sfNk (on, with MORI_IO_TCP_STRIPE_FROM=NK: striped above N KiB, pieces still
#          up to the chunk; the default is 192 KiB, sf0k the chunk alone, as before 2026-12-05) or usN
#          (MORI_IO_TCP_POLL_US=N, whatever the CPU count)
#   SIZES  message sizes (default 8,4K,64K,256K,1M,4M,16M,64M), batches 1 and 128
#   OUT    where each run's JSON and log go (default bench-results/io-small), and summary.txt:
#          per row, the median over runs of each setting of x socket, x the socket one by one
#          and x Mooncake, and the 8 B latency.
# Runs of one call add to those of an earlier call in the same OUT (the summary reads them all),
# so a sitting may be split over several calls: ORDER="off on on" then ORDER="off off on"; with
# ORDER="" it only summarizes what OUT holds (the JSON of several calls copied into one folder).
# Each run has 300 s (timeout); six runs may outlast one 10-minute device call: then split them.
set -uo pipefail
PY=${PYTHON:-python3}
ORDER=${ORDER-off on on off off on}
SIZES=${SIZES:-8,4K,64K,256K,1M,4M,16M,64M}
OUT=${OUT:-bench-results/io-small}
cd "$(dirname "$0")/.."
mkdir -p "$OUT"
{
  date -u
  echo "cpus online $(nproc --all), usable $(nproc); load: $(cut -d' ' -f1-3 /proc/loadavg)"
  $PY -c 'import mori, sys; print("mori from", mori.__file__, "python", sys.executable)'
} | tee -a "$OUT/machine.txt"
for v in $ORDER; do
  case $v in
    off) vars=(MORI_IO_TCP_POLL_US=0) ;;
    on) vars=(MORI_IO_TCP_POLL_US=auto) ;;
    on64k | on128k) c=${v#on}; vars=(MORI_IO_TCP_POLL_US=auto MORI_IO_TCP_CHUNK=${c%k}K) ;;
    sf[0-9]*k) c=${v#sf}; vars=(MORI_IO_TCP_POLL_US=auto MORI_IO_TCP_STRIPE_FROM=${c%k}K) ;;
    us[0-9]*) vars=(MORI_IO_TCP_POLL_US=${v#us}) ;;
    *) echo "unknown run '$v' (off, on, on64k, on128k, sfNk, usN)" >&2; exit 2 ;;
  esac
  name=$(date -u +%H%M%S)-$v
  start=$SECONDS
  env "${vars[@]}" timeout 300 $PY -m mori.apps.cli bench io --mori tcp --apis session \
    --baselines socket,socket-serial,mooncake-tcp --sizes "$SIZES" --batches 1,128 \
    --json "$OUT/$name.json" > "$OUT/$name.log" 2>&1
  rc=$?
  echo "== $name (${vars[*]}): exit $rc, $((SECONDS - start)) s; load $(cut -d' ' -f1 /proc/loadavg)"
  [ $rc -eq 0 ] || tail -20 "$OUT/$name.log"
  grep -E "^target|not installed|skipped" "$OUT/$name.log" | sed 's/^/   /'
done
$PY - "$OUT" <<'EOF' | tee "$OUT/summary.txt"
import glob, json, os, statistics, sys

out = sys.argv[1]
runs = {}  # setting -> list of documents
for path in sorted(glob.glob(os.path.join(out, "*.json"))):
    setting = os.path.basename(path)[:-5].split("-", 1)[1]
    with open(path) as f:
        runs.setdefault(setting, []).append(json.load(f))
settings = [s for s in ("off", "on", "on64k", "on128k") if s in runs] + sorted(
    s for s in runs if s.startswith(("sf", "us"))
)
print("runs:", ", ".join(f"{s} x{len(runs[s])}" for s in settings), "(medians over a setting's runs)")
cols = ("x socket", "x sock-1by1", "x mooncake")
keys = sorted({(r["op"], r["BatchSize"], r["MsgSize (B)"]) for docs in runs.values() for d in docs
               for r in d["rows"] if r["engine"] == "mori-tcp"})

def med(setting, key, col):
    vals = [r[col] for d in runs[setting] for r in d["rows"] if r["engine"] == "mori-tcp"
            and (r["op"], r["BatchSize"], r["MsgSize (B)"]) == key and r.get(col) is not None]
    return statistics.median(vals) if vals else None

def fmt(v):
    return "   -" if v is None else f"{v:5.2f}"

head = "op     batch      size  " + "  ".join(f"{c:>{6 * len(settings)}}" for c in cols)
print(head)
print(" " * 24 + "  ".join(" ".join(f"{s:>5}" for s in settings).rjust(6 * len(settings)) for _ in cols))
for key in keys:
    op, batch, size = key
    cells = ["  ".join([" ".join(fmt(med(s, key, c)) for s in settings).rjust(6 * len(settings))]) for c in cols]
    print(f"{op:6} {batch:5} {size:9}  " + "  ".join(cells))
print("8 B latency, mori-tcp (median over runs): p50 us / p50 x socket / p99/p50")
for s in settings:
    for op in ("write", "read"):
        lat = [r for d in runs[s] for r in d["meta"].get("latency", []) if r["engine"] == "mori-tcp" and r["op"] == op]
        if lat:
            m = lambda c: statistics.median([r[c] for r in lat if r.get(c) is not None] or [float("nan")])
            print(f"  {s:6} {op:5} {m('p50_us'):6.1f} {m('p50 x socket'):5.2f} {m('p99/p50'):5.2f}")
EOF
