# SPDX-License-Identifier: MIT
"""The collectives' rows of MORI's settings table (core/include/mori/core/env_defs.h),
read when asked so a change of the environment is seen."""
from __future__ import annotations

from typing import Union

from mori import _C

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
        if kind == "seconds":
            return float(value)
        return value
    raise KeyError(f"{name} is not in MORI's settings table")
