# SPDX-License-Identifier: MIT
"""mori.umbp: MORI-UMBP, the tiered KV-cache store, under MORI's names.

A key -> bytes store for LLM KV caches: values live in a host DRAM tier and are mirrored to an SSD
tier (a segmented log in ``UMBPSsdConfig.storage_dir``). ``UMBPClient(UMBPConfig())`` is the
in-process store; with ``config.standalone_process`` set it is a client of the per-host server that
the ranks of a host share. Pointers are ``int`` addresses of host memory (``ctypes.addressof``,
``tensor.data_ptr()``, ``UMBPHostBufferHandle.ptr``); every I/O call releases the GIL.

    cfg = UMBPConfig.from_environment()          # MORI's defaults + UMBP_* settings
    client = UMBPClient(cfg)
    client.batch_put_from_ptr(keys, ptrs, sizes)  # -> list[bool]; a stored key keeps its value
    client.batch_exists_consecutive(keys)         # length of the stored prefix
    client.batch_get_into_ptr(keys, ptrs, sizes)

The same names are attributes of ``mori.cpp`` (MORI's native module name).
"""

from mori._C.umbp import (
    CacheRemoteAdmission,
    UMBPConfig,
    UMBPCopyPipelineConfig,
    UMBPDeploymentMode,
    UMBPDistributedConfig,
    UMBPDramConfig,
    UMBPDurabilityConfig,
    UMBPDurabilityMode,
    UMBPEvictionConfig,
    UMBPExternalKvHitCountEntry,
    UMBPExternalKvMatch,
    UMBPHostBufferBacking,
    UMBPHostBufferHandle,
    UMBPHostMemAllocator,
    UMBPIoBackend,
    UMBPIoConfig,
    UMBPRole,
    UMBPSsdConfig,
    UMBPStandaloneProcessConfig,
    UMBPTierType,
)

from mori._C.umbp import UMBPClient as _NativeClient  # noqa: E402


class UMBPClient(_NativeClient):
    """MORI-UMBP's data-plane client: ``UMBPClient(config)``.

    The local store, or a client of the per-host server (``config.standalone_process``), are the
    native class as they are; with ``config.distributed`` set this is a
    ``mori.umbp.distributed.distributed_client.DistributedUMBPClient`` (same API), whose control
    plane (gRPC to the master and the peers) is Python.
    """

    def __new__(cls, config=None, *args, **kwargs):
        if cls is UMBPClient and config is not None and getattr(config, "distributed", None) is not None:
            from mori.umbp.distributed.distributed_client import DistributedUMBPClient

            cls = DistributedUMBPClient
        return super().__new__(cls)


__all__ = [
    "CacheRemoteAdmission",
    "UMBPClient",
    "UMBPConfig",
    "UMBPCopyPipelineConfig",
    "UMBPDeploymentMode",
    "UMBPDistributedConfig",
    "UMBPDramConfig",
    "UMBPDurabilityConfig",
    "UMBPDurabilityMode",
    "UMBPEvictionConfig",
    "UMBPExternalKvHitCountEntry",
    "UMBPExternalKvMatch",
    "UMBPHostBufferBacking",
    "UMBPHostBufferHandle",
    "UMBPHostMemAllocator",
    "UMBPIoBackend",
    "UMBPIoConfig",
    "UMBPRole",
    "UMBPSsdConfig",
    "UMBPStandaloneProcessConfig",
    "UMBPTierType",
]

# auto_start's default server program (used when UMBP_STANDALONE_BIN is unset): this interpreter
# running mori.umbp.server.
import sys as _sys  # noqa: E402

from mori._C.umbp import set_default_server_command as _set_default_server_command  # noqa: E402

_set_default_server_command([_sys.executable, "-m", "mori.umbp.server"])

# mori.cpp.UMBPClient (MORI's native module name) is this class too, so it builds distributed clients.
from mori import _C as _native  # noqa: E402

_native.UMBPClient = UMBPClient
