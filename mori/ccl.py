# SPDX-License-Identifier: MIT
"""``mori.ccl``: MORI's name for the collectives layer; the same module as ``mori.collectives``."""

import sys

import mori.collectives as _collectives

sys.modules[__name__] = _collectives
