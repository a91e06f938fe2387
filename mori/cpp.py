# SPDX-License-Identifier: MIT
"""``mori.cpp``: ROCm/mori's name for its native module; here the native module ``mori._C``
(submodules core, shmem, collectives, ep, io, umbp; MORI's flat names TransferStatus and the UMBP
classes are attributes of it too)."""

import sys

from mori import _C as _native


# MORI's UMBP control-plane names, ours in Python (mori.umbp.distributed), loaded on first use.
_UMBP_CONTROL_PLANE = {"UMBPMasterClient", "UMBPExternalKvNodeMatch"}


def _moris_ep_name(name: str):
    if name in _UMBP_CONTROL_PLANE:
        import mori.umbp.distributed as umbp_distributed

        return getattr(umbp_distributed, name)
    # MORI's native EP names (mori.ep.cpp_names), loaded on first use: they need torch.
    if name.startswith("__"):  # `from mori.cpp import X` asks for __path__: no torch for that
        raise AttributeError(f"module 'mori.cpp' has no attribute {name!r}")
    from mori.ep import cpp_names

    if name in cpp_names.__all__:
        return getattr(cpp_names, name)
    raise AttributeError(f"module 'mori.cpp' has no attribute {name!r}")


_native.__getattr__ = _moris_ep_name
# mori.umbp puts its UMBPClient here (it builds distributed clients too, as MORI's does).
import mori.umbp  # noqa: E402,F401

sys.modules[__name__] = _native
