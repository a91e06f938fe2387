# SPDX-License-Identifier: MIT
"""``mori.ops``: MORI's name for the expert-parallel layer; the same module as ``mori.ep``.
MORI's submodule paths (``mori.ops.dispatch_combine``, ``mori.ops.tuning_config``,
``mori.ops.local_expert_count``) are the same module objects as their ``mori.ep`` ones."""

import importlib
import sys

import mori.ep as _ep

sys.modules[__name__] = _ep
for _sub in ("dispatch_combine", "tuning_config", "local_expert_count"):
    sys.modules[f"{__name__}.{_sub}"] = importlib.import_module(f"mori.ep.{_sub}")
