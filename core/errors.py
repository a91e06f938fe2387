# SPDX-License-Identifier: MIT
"""MORI's exceptions. Each also inherits the builtin a Python user would expect,
so ``except ValueError`` catches a bad argument and ``except TimeoutError`` a timeout."""

from __future__ import annotations

from mori import _C

# Status codes of the native core (core/include/mori/core/status.h), bound as an IntEnum.
Status = _C.core.Status


class MoriError(RuntimeError):
    """Base of every error raised by MORI's native core."""

    status = Status.INTERNAL


class InvalidArgument(MoriError, ValueError):
    status = Status.INVALID_ARGUMENT


class InvalidUsage(MoriError):
    status = Status.INVALID_USAGE


class OutOfMemory(MoriError, MemoryError):
    status = Status.OUT_OF_MEMORY


class SystemError_(MoriError, OSError):
    status = Status.SYSTEM


class TransportError(MoriError):
    status = Status.TRANSPORT


class RemoteError(MoriError):
    """A peer refused a request, died, or left the job."""

    status = Status.REMOTE


class Timeout(MoriError, TimeoutError):
    status = Status.TIMEOUT


class Unavailable(MoriError, NotImplementedError):
    status = Status.UNAVAILABLE


class DeviceError(MoriError):
    """A GPU call failed (a CUDA runtime error, from any layer)."""

    status = Status.DEVICE


_BY_STATUS = {
    cls.status: cls
    for cls in (
        InvalidArgument,
        InvalidUsage,
        OutOfMemory,
        SystemError_,
        TransportError,
        RemoteError,
        Timeout,
        Unavailable,
        DeviceError,
    )
}


def error_class(status: int) -> type[MoriError]:
    """The exception class for a native status code (used by the C++ translator)."""
    return _BY_STATUS.get(status, MoriError)
