# SPDX-License-Identifier: MIT
"""``mori.cpp``: ROCm/mori's name for its native module; here the native module ``mori._C``
(submodules core, shmem, collectives, ep, io)."""
import sys

from mori import _C as _native

sys.modules[__name__] = _native
