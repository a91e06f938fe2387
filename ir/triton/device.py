# SPDX-License-Identifier: MIT
"""One Triton function per row of ``MORI_DEVICE_FUNCTIONS``, callable inside ``@triton.jit``:

    from mori.ir.triton import mori_shmem_device

    @triton.jit
    def kernel(buf, sig, nbytes):
        peer = (mori_shmem_device.my_pe() + 1) % mori_shmem_device.n_pes()
        mori_shmem_device.putmem_nbi_signal_block(buf, buf, nbytes, sig, 1, mori_shmem_device.SIGNAL_SET, peer, 0)

Scalar calls run on every thread of the program, like the CUDA functions they wrap: call
``*_block`` functions from all threads, ``*_thread`` ones under a one-thread guard when the
operation must happen once. Pointers (Triton pointers or int addresses) are passed as uint64.
"""

from __future__ import annotations

import triton.language as tl
from triton.language import core

from mori.ir.functions import DEVICE_FUNCTIONS, SIGNAL_ADD, SIGNAL_SET, DeviceFunction

LIB_NAME = "mori_shmem_device"
_TL_TYPES = {
    "int8": tl.int8,
    "uint8": tl.uint8,
    "int16": tl.int16,
    "uint16": tl.uint16,
    "int32": tl.int32,
    "uint32": tl.uint32,
    "int64": tl.int64,
    "uint64": tl.uint64,
    "float32": tl.float32,
    "float64": tl.float64,
}


def _wrapper(fn: DeviceFunction):
    arg_types = tuple(_TL_TYPES[a.abi] for a in fn.args)
    ret_type = _TL_TYPES[fn.ret]
    symbol, pure, n_args = fn.symbol, fn.pure, len(fn.args)

    def call(*args, _semantic=None):
        if len(args) != n_args:
            raise TypeError(
                f"mori_shmem_device.{fn.name} takes {n_args} arguments "
                f"({', '.join(a.name for a in fn.args)}), got {len(args)}"
            )
        cast = [tl.cast(a, t, _semantic=_semantic) for a, t in zip(args, arg_types)]
        return core.extern_elementwise(
            LIB_NAME, "", cast, {arg_types: (symbol, ret_type)}, is_pure=pure, _semantic=_semantic
        )

    call.__name__ = call.__qualname__ = fn.name
    call.__doc__ = f"{symbol}({', '.join(f'{a.name}: {a.abi}' for a in fn.args)}) -> {fn.ret}: {fn.doc}"
    return core.extern(call)


for _fn in DEVICE_FUNCTIONS:
    globals()[_fn.name] = _wrapper(_fn)
del _fn

__all__ = [f.name for f in DEVICE_FUNCTIONS] + ["SIGNAL_SET", "SIGNAL_ADD", "LIB_NAME"]
