# SPDX-License-Identifier: MIT
"""``mori.kernel_profiler``: MORI's name for the EP trace export; the same module as ``mori.ep.profiler``."""

import sys

import mori.ep.profiler as _profiler

sys.modules[__name__] = _profiler
