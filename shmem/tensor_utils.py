# SPDX-License-Identifier: MIT
"""Symmetric torch CUDA tensors on the GPU heap (MORI's tensor helpers, same names and
semantics): ``mori_shmem_create_tensor(shape, dtype)`` allocates (collectively) and wraps a
tensor on this PE's GPU; ``symm_mori_shmem_tensor(t, peer)`` is the same tensor on ``peer`` as
this GPU reaches it over NVLink (reads and writes go straight to the peer's memory).

Tensors are uninitialized, as in MORI. Peer views do not own memory: they are valid until
``mori_shmem_free_tensor`` of the original or shmem finalize.
"""

from __future__ import annotations

from typing import Any, Sequence, Union

import torch

from mori import _C
from mori.core.errors import InvalidArgument, InvalidUsage, Unavailable
from mori.shmem import api
from mori.shmem.arrays import _heap_bytes, _shape

_native = _C.shmem
_SYMM_ATTR = "__symm_tensor__"


class MoriShmemBuffer:
    """A device byte range exposed through ``__cuda_array_interface__`` (any CUDA array
    library can wrap it; torch tensors come from :func:`wrap_device_pointer`)."""

    def __init__(self, ptr: int, nbytes: int, dtype: torch.dtype = torch.uint8) -> None:
        self.ptr = int(ptr)
        self.nbytes = int(nbytes)
        self.dtype = dtype
        self.__cuda_array_interface__ = {
            "data": (self.ptr, False),
            "shape": (self.nbytes,),
            "typestr": "|u1",
            "strides": None,
            "version": 3,
        }


def _device() -> torch.device:
    if not _native.gpu_bound():
        raise InvalidUsage(
            "this PE has no GPU symmetric heap: call torch.cuda.set_device(...) (or set MORI_DEVICE) before shmem init"
        )
    return torch.device("cuda", int(_native.gpu_device()))


def wrap_device_pointer(ptr: int, nbytes: int, dtype: torch.dtype, shape: Sequence[int]) -> torch.Tensor:
    """A torch tensor over ``nbytes`` at device address ``ptr`` on this PE's GPU (no copy, no ownership).

    The device is set explicitly: an IPC-mapped peer address must be used from this PE's GPU,
    whatever device the CUDA pointer attributes name."""
    dev = _device()
    make = getattr(torch._C, "_construct_storage_from_data_pointer", None)
    if make is not None:
        storage = make(int(ptr), dev, int(nbytes))
        flat = torch.empty(0, dtype=torch.uint8, device=dev)
        flat.set_(storage, 0, (int(nbytes),), (1,))
    else:  # older torch: go through __cuda_array_interface__ and refuse anything but a zero-copy view here
        flat = torch.as_tensor(MoriShmemBuffer(ptr, nbytes), device=dev)
        if flat.data_ptr() != int(ptr) or flat.device != dev:
            raise Unavailable("this torch cannot wrap a peer pointer without copying; upgrade torch (>= 2.1)")
    return flat.view(dtype).view(*shape)


def mori_shmem_create_tensor(shape: Union[int, Sequence[int]], dtype: torch.dtype) -> torch.Tensor:
    """Allocate a symmetric tensor on the GPU heap. Collective (same shape and dtype on every PE)."""
    if not isinstance(dtype, torch.dtype):
        raise InvalidArgument(f"mori_shmem_create_tensor: dtype must be a torch.dtype, got {dtype!r}")
    # The host arrays' checks: no negative dimension, and a byte count in Python ints, which do
    # not wrap (torch.Size.numel() does: (2**62, 8) has "0" elements there).
    shape = _shape(shape, "mori_shmem_create_tensor")
    nbytes = _heap_bytes(shape, dtype.itemsize, "mori_shmem_create_tensor") if 0 not in shape else 0
    if nbytes == 0:
        raise InvalidArgument(f"mori_shmem_create_tensor: shape {shape} has no elements")
    dev = _device()
    torch.cuda.synchronize(dev)
    ptr = api.shmem_malloc(nbytes)
    t = wrap_device_pointer(ptr, nbytes, dtype, shape)
    setattr(t, _SYMM_ATTR, True)
    return t


def _check_symm(tensor: Any, caller: str) -> None:
    if not isinstance(tensor, torch.Tensor) or not getattr(tensor, _SYMM_ATTR, False):
        raise InvalidArgument(f"{caller}: expected a tensor from mori_shmem_create_tensor")


def symm_mori_shmem_tensor(tensor: torch.Tensor, peer: int) -> torch.Tensor:
    """``tensor``'s counterpart on PE ``peer``, as a tensor this GPU loads/stores over P2P."""
    _check_symm(tensor, "symm_mori_shmem_tensor")
    me = api.shmem_mype()
    if peer == me:
        return tensor
    if not 0 <= peer < api.shmem_npes():
        raise InvalidArgument(f"symm_mori_shmem_tensor: peer {peer} is out of range [0, {api.shmem_npes()})")
    ptr = api.shmem_ptr_p2p(tensor.data_ptr(), me, peer)
    if ptr == 0:
        raise Unavailable(f"symm_mori_shmem_tensor: PE {peer}'s GPU heap is not P2P-reachable from PE {me}")
    view = wrap_device_pointer(ptr, tensor.nbytes, tensor.dtype, tensor.shape)
    setattr(view, "__symm_peer__", peer)
    return view


def mori_shmem_free_tensor(tensor: torch.Tensor) -> None:
    """Free a tensor made by :func:`mori_shmem_create_tensor`. Collective. Finishes this GPU's work
    first, so no kernel of this PE still touches the memory."""
    _check_symm(tensor, "mori_shmem_free_tensor")
    torch.cuda.synchronize(tensor.device)
    api.shmem_free(tensor.data_ptr())
    torch.cuda.synchronize(tensor.device)


def mori_shmem_create_tensor_list_intra_node(
    shape: Union[int, Sequence[int]], dtype: torch.dtype, num_ranks: int
) -> list[torch.Tensor]:
    """One symmetric tensor, returned as its views on PEs ``0 .. num_ranks-1`` (this PE's own entry
    is the tensor itself). Collective."""
    if not 0 < num_ranks <= api.shmem_npes():
        raise InvalidArgument(f"num_ranks must be in [1, {api.shmem_npes()}], got {num_ranks}")
    tensor = mori_shmem_create_tensor(shape, dtype)
    return [symm_mori_shmem_tensor(tensor, pe) for pe in range(num_ranks)]


__all__ = [
    "MoriShmemBuffer",
    "wrap_device_pointer",
    "mori_shmem_create_tensor",
    "symm_mori_shmem_tensor",
    "mori_shmem_free_tensor",
    "mori_shmem_create_tensor_list_intra_node",
]
