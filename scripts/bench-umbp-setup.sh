#!/usr/bin/env bash
# Installs the peer baseline of `mori bench umbp` (not part of CI's setup): Mooncake Store from
# PyPI's CPU build, which ships the `mooncake_master` binary and `mooncake.store`.
# The wheel goes in with --no-deps: its Python dependencies (aiohttp, ...) are not needed by the
# store's client and cannot be fetched on an offline host; the check below says what is missing.
# Without it the benchmark reports the Mooncake rows as skipped, with the reason, and still runs.
set -uo pipefail
PY=${PYTHON:-python3}
$PY -m pip install -q --disable-pip-version-check --no-deps mooncake-transfer-engine-non-cuda ||
    echo "pip could not install the wheel (offline with no local copy?)" >&2
$PY - <<'PYEOF'
import sys
from mori.apps.bench.umbp_mooncake import master_binary, unavailable

why = unavailable()
if why:
    raise SystemExit(f"Mooncake Store is not usable from {sys.executable}: {why}")
print("ok mooncake.store, master:", master_binary())
PYEOF
