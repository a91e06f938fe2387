# SPDX-License-Identifier: MIT
"""MORI's environment settings, read through the native table (core/include/mori/core/env_defs.h).

The table is the only reader of MORI_* / UMBP_* variables: Python asks it for typed values
instead of parsing ``os.environ`` (tests/test_env_table.py keeps it so).
"""

from __future__ import annotations

from typing import Union

from mori import _C

SettingValue = Union[int, bool, float, str]


def parse_size(text: str) -> int:
    """Parse a size such as ``"512M"`` or ``"4GiB"`` into bytes (binary multiples)."""
    return _C.core.parse_size(text)


def env_table() -> list[dict]:
    """Every MORI_* / UMBP_* variable: name, type, default, category, alias, current value,
    description, is_set and set_by_alias."""
    return _C.core.env_table()


def setting(name: str) -> SettingValue:
    """Current value of the variable ``name`` (or of its alias), parsed by its type in the table.

    size and int rows give an ``int``, seconds and number rows a ``float``, bool rows a ``bool``,
    string rows a ``str``. Raises ``mori.core.errors.InvalidArgument`` (a ``ValueError``) for a
    malformed value or a name that is not in the table.
    """
    return _C.core.env_value(name)
