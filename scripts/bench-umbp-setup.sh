#!/usr/bin/env bash
# Installs the peer baseline of `mori bench umbp` (not part of CI's setup): Mooncake Store from
# PyPI's CPU build, which ships the `mooncake_master` binary and `mooncake.store`.
# Without it the benchmark reports the Mooncake rows as skipped, with the reason, and still runs.
set -euo pipefail
PY=${PYTHON:-python3}
$PY -m pip install -q --disable-pip-version-check mooncake-transfer-engine-non-cuda
$PY - <<'PYEOF'
from mori.apps.bench.umbp_mooncake import master_binary, unavailable

why = unavailable()
if why:
    raise SystemExit(f"Mooncake Store is not usable: {why}")
print("ok mooncake.store, master:", master_binary())
PYEOF
