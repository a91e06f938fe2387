# SPDX-License-Identifier: MIT
"""``mori.ops``: MORI's name for the expert-parallel layer; the same module as ``mori.ep``."""
import sys

import mori.ep as _ep

sys.modules[__name__] = _ep
