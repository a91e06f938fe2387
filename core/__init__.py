# SPDX-License-Identifier: MIT
"""mori.core: errors, environment settings, bootstraps and topology."""
from mori.core.errors import (
    DeviceError,
    InvalidArgument,
    InvalidUsage,
    MoriError,
    OutOfMemory,
    RemoteError,
    SystemError_,
    Timeout,
    TransportError,
    Unavailable,
)
from mori.core.env import env_table, parse_size

__all__ = [
    "MoriError", "InvalidArgument", "InvalidUsage", "OutOfMemory", "SystemError_", "TransportError",
    "RemoteError", "Timeout", "Unavailable", "DeviceError", "env_table", "parse_size",
]
