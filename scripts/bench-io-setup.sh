#!/usr/bin/env bash
# Installs the optional baselines of `mori bench io` (not part of CI's setup):
#   Mooncake Transfer Engine (CPU build, tcp transport) and NIXL with its bundled UCX.
# `nixl` (the meta package) would pull both the CUDA 12 and CUDA 13 builds (~430 MB);
# nixl-cu12 alone is enough for DRAM transfers and imports without a GPU.
# Without them the benchmark reports those rows as skipped.
set -euo pipefail
PY=${PYTHON:-python3}
$PY -m pip install -q --disable-pip-version-check mooncake-transfer-engine-non-cuda nixl-cu12
$PY - <<'PYEOF'
import importlib
for mod in ("mooncake.engine", "nixl_cu12._api"):
    importlib.import_module(mod)
    print("ok", mod)
PYEOF
