# SPDX-License-Identifier: MIT
"""MORI's environment settings, read through the native table (core/include/mori/core/env_defs.h)."""
from __future__ import annotations

from typing import Union

from mori import _C


def parse_size(text: str) -> int:
    """Parse a size such as ``"512M"`` or ``"4GiB"`` into bytes (binary multiples)."""
    return _C.core.parse_size(text)


def env_table() -> list[dict]:
    """Every MORI_* variable with its type, default, current value and description."""
    return _C.core.env_table()


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def setting(name: str) -> Union[int, bool, float, str]:
    """Current value of the MORI_* variable ``name``, parsed by its type in the table."""
    for row in _C.core.env_table():
        if row["name"] != name:
            continue
        value, kind = row["value"], row["type"]
        if kind == "size":
            return _C.core.parse_size(value)
        if kind == "bool":
            v = value.strip().lower()
            if v in _TRUE:
                return True
            if v in _FALSE:
                return False
            raise ValueError(f"{name}={value!r} is not a boolean (use 1/0, true/false, yes/no, on/off)")
        if kind == "int":
            return int(value)
        if kind in ("seconds", "number"):
            return float(value)
        return value
    raise KeyError(f"{name} is not in MORI's settings table")
