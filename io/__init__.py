# SPDX-License-Identifier: MIT
"""mori.io: MORI-IO, the point-to-point transfer engine (MORI's API).

Engines meet through descriptors (``EngineDesc``, ``MemoryDesc``; ``pack()`` them and
ship the bytes any way you like), then read and write registered memory one-sidedly:
over tcp between hosts, directly (``process_vm_readv/writev``) between CPU memory of one
host, and with CUDA IPC + copy engines between GPUs of one node. ``TransferStatus`` is in
``mori.cpp`` as in ROCm/mori.
"""

from mori._C.io import (
    BackendType,
    EngineDesc,
    IOEngineConfig,
    MemoryDesc,
    MemoryLocationType,
    PollCqMode,
    RdmaBackendConfig,
    StatusCode,
    TcpBackendConfig,
    TransferStatus,
    XgmiBackendConfig,
    set_log_level,
)
from mori.io.engine import TORCH_DEVICE_TYPE_MAP, IOEngine, IOEngineSession

__all__ = [
    "BackendType",
    "EngineDesc",
    "IOEngine",
    "IOEngineConfig",
    "IOEngineSession",
    "MemoryDesc",
    "MemoryLocationType",
    "PollCqMode",
    "RdmaBackendConfig",
    "StatusCode",
    "TcpBackendConfig",
    "TransferStatus",
    "XgmiBackendConfig",
    "TORCH_DEVICE_TYPE_MAP",
    "set_log_level",
]
