# SPDX-License-Identifier: MIT
"""MORI's exceptions. Each also inherits the builtin a Python user would expect,
so ``except ValueError`` catches a bad argument and ``except TimeoutError`` a timeout."""
from __future__ import annotations


class MoriError(RuntimeError):
    """Base of every error raised by MORI's native core."""

    status = 9


class InvalidArgument(MoriError, ValueError):
    status = 1


class InvalidUsage(MoriError):
    status = 2


class OutOfMemory(MoriError, MemoryError):
    status = 3


class SystemError_(MoriError, OSError):
    status = 4


class TransportError(MoriError):
    status = 5


class RemoteError(MoriError):
    """A peer refused a request, died, or left the job."""

    status = 6


class Timeout(MoriError, TimeoutError):
    status = 7


class Unavailable(MoriError, NotImplementedError):
    status = 8


class DeviceError(MoriError):
    """A GPU call failed (a CUDA runtime error, from any layer)."""

    status = 10


_BY_STATUS = {cls.status: cls for cls in (InvalidArgument, InvalidUsage, OutOfMemory, SystemError_,
                                          TransportError, RemoteError, Timeout, Unavailable, DeviceError)}


def error_class(status: int) -> type[MoriError]:
    """The exception class for a native status code (used by the C++ translator)."""
    return _BY_STATUS.get(status, MoriError)
