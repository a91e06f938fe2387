#!/usr/bin/env bash
# Installs the optional baselines of `mori bench io` (not part of CI's setup):
#   Mooncake Transfer Engine (CPU build, tcp transport) and NIXL with its bundled UCX.
# `nixl` (the meta package) would pull both the CUDA 12 and CUDA 13 builds (~430 MB);
# nixl-cu12 alone is enough for DRAM transfers and imports without a GPU.
# The wheels go in with --no-deps: their Python dependencies (aiohttp, ...) are not needed for
# the transfers benchmarked and cannot be fetched on an offline host; the import check below
# says what is missing if they are. Without them the benchmark reports those rows as skipped.
set -uo pipefail
PY=${PYTHON:-python3}
$PY -m pip install -q --disable-pip-version-check --no-deps mooncake-transfer-engine-non-cuda nixl-cu12 ||
    echo "pip could not install the wheels (offline with no local copy?)" >&2
$PY - <<'PYEOF'
import importlib, sys
bad = 0
for mod in ("mooncake.engine", "nixl_cu12._api"):
    try:
        importlib.import_module(mod)
        print("ok", mod)
    except Exception as e:  # report every missing piece, not only the first
        bad += 1
        print(f"missing {mod} ({sys.executable}): {type(e).__name__}: {e}")
sys.exit(1 if bad else 0)
PYEOF
