# SPDX-License-Identifier: MIT
"""mori.core: errors, environment settings, bootstraps and topology."""

from mori import _C
from mori.core.errors import (
    DeviceError,
    InvalidArgument,
    InvalidUsage,
    MoriError,
    OutOfMemory,
    RemoteError,
    Status,
    SystemError_,
    Timeout,
    TransportError,
    Unavailable,
)
from mori.core.env import env_table, parse_size, setting

LogLevel = _C.core.LogLevel  # MORI_LOG_LEVEL's levels (core/include/mori/core/log.h)

__all__ = [
    "MoriError",
    "InvalidArgument",
    "InvalidUsage",
    "OutOfMemory",
    "SystemError_",
    "TransportError",
    "RemoteError",
    "Timeout",
    "Unavailable",
    "DeviceError",
    "Status",
    "LogLevel",
    "env_table",
    "parse_size",
    "setting",
]
