# SPDX-License-Identifier: MIT
"""MORI's environment settings, read through the native table (core/include/mori/core/env_defs.h)."""
from __future__ import annotations

from mori import _C


def parse_size(text: str) -> int:
    """Parse a size such as ``"512M"`` or ``"4GiB"`` into bytes (binary multiples)."""
    return _C.core.parse_size(text)


def env_table() -> list[dict]:
    """Every MORI_* variable with its type, default, current value and description."""
    return _C.core.env_table()
