# SPDX-License-Identifier: MIT
"""MORI's class-shaped all-gather API, over :func:`mori.ccl.all_gather_into_tensor`'s engines.

* :class:`AllGatherIntoTensor` — the ncclAllGather-shaped entry DeepSpeed's MORI hook calls:
  ``ag = AllGatherIntoTensor(my_pe, npes, input_buffer_size, output_buffer_size)``, then
  ``ag(send_ptr, recv_ptr, sendcount, DataType.BFloat16, stream_ptr) -> bool``.
* :class:`AllgatherSdma` — the same on tensors: ``ag(input, output, count, stream=None)``.

Both take raw addresses or tensors, on a GPU (copy-engine pushes through the GPU symmetric
heap, enqueued on ``stream``, else torch's current stream) or in host memory (the shared host
heap). As in MORI, a call whose input or output exceeds the buffer sizes given at construction
returns False (callers such as DeepSpeed then take their own path); bad arguments raise, and
:class:`AllGatherIntoTensor` refuses a per-PE byte length that is not a multiple of 4 (MORI's
copy engine moves uint32 lanes). ``copy_output_to_user=False`` leaves the result in the output
transit buffer (:meth:`AllgatherSdma.get_output_transit_buffer`) instead of the caller's output;
with ``copy_output_to_user=True`` :class:`AllgatherSdma` fills both, as MORI's (its users read the
transit buffer after a call). Our engine needs no flag resets; registration of an output is
recorded (``auto_register=True``: every call's output is), and a push lands directly in any
output that lies in the symmetric heap (``mori.shmem.tensor`` / ``mori_shmem_create_tensor``),
registered or not.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, Optional

import numpy as np

from mori import _C
from mori.collectives.api import all_gather_into_tensor
from mori.collectives.dtypes import DataType, data_type, size_of
from mori.core.errors import InvalidArgument, InvalidUsage

DEFAULT_TRANSIT_BYTES = 512 << 20  # MORI's default transit buffer


def _address(x: Any, name: str, caller: str) -> int:
    if hasattr(x, "data_ptr"):
        return int(x.data_ptr())
    if isinstance(x, (int, np.integer)) and not isinstance(x, bool):
        return int(x)
    raise InvalidArgument(f"{caller}: {name} must be an address (int) or a tensor, got {type(x).__name__}")


def _stream_handle(stream: Any) -> Optional[int]:
    """cudaStream_t as an integer (None: torch's current stream)."""
    if stream is None:
        return None
    if hasattr(stream, "cuda_stream"):
        return int(stream.cuda_stream)
    return int(stream)


class AllGatherIntoTensor:
    """``AllGatherIntoTensor(my_pe, npes, input_buffer_size, output_buffer_size, copy_output_to_user=True,
    auto_register=False)`` or ``AllGatherIntoTensor(my_pe, npes, transit_buffer_size=512 MiB,
    copy_output_to_user=True, auto_register=False)`` (split evenly between input and output, as in
    MORI). Collective: every PE builds one."""

    def __init__(
        self,
        my_pe: int,
        npes: int,
        *sizes: Any,
        copy_output_to_user: bool = True,
        auto_register: bool = False,
        input_buffer_size: Optional[int] = None,
        output_buffer_size: Optional[int] = None,
        transit_buffer_size: Optional[int] = None,
    ) -> None:
        caller = "mori.ccl.AllGatherIntoTensor"
        flags = []
        while sizes and isinstance(sizes[-1], bool):  # MORI's trailing positional copy_output_to_user, auto_register
            flags.insert(0, sizes[-1])
            sizes = sizes[:-1]
        if len(flags) > 2:
            raise InvalidArgument(
                f"{caller}: expected at most copy_output_to_user and auto_register after the sizes, "
                f"got {len(flags)} flags"
            )
        if flags:
            copy_output_to_user = flags[0]
        if len(flags) == 2:
            auto_register = flags[1]
        if len(sizes) == 2:
            input_buffer_size, output_buffer_size = sizes
        elif len(sizes) == 1:
            transit_buffer_size = sizes[0]
        elif sizes:
            raise InvalidArgument(
                f"{caller}: expected (my_pe, npes, input_buffer_size, output_buffer_size"
                f"[, copy_output_to_user]) or (my_pe, npes[, transit_buffer_size]"
                f"[, copy_output_to_user]), got {len(sizes)} sizes"
            )
        me, n = _C.shmem.my_pe(), _C.shmem.n_pes()
        if my_pe != me:
            raise InvalidArgument(f"{caller}: my_pe={my_pe}, but this process is PE {me}")
        if npes != n:
            raise InvalidArgument(f"{caller}: npes={npes}, but the job has {n} PEs")
        if (input_buffer_size is None) != (output_buffer_size is None):
            raise InvalidArgument(f"{caller}: give input_buffer_size and output_buffer_size together")
        if input_buffer_size is None:
            transit = DEFAULT_TRANSIT_BYTES if transit_buffer_size is None else int(transit_buffer_size)
            if transit <= 0:
                raise InvalidArgument(f"{caller}: transit_buffer_size must be > 0, got {transit}")
            input_buffer_size = output_buffer_size = transit // 2
        for name, v in (("input_buffer_size", input_buffer_size), ("output_buffer_size", output_buffer_size)):
            if int(v) <= 0:
                raise InvalidArgument(f"{caller}: {name} must be > 0, got {v}")
        self._me, self._n = me, n
        self.input_buffer_size, self.output_buffer_size = int(input_buffer_size), int(output_buffer_size)
        self.copy_output_to_user = bool(copy_output_to_user)
        self.auto_register = bool(auto_register)
        self._lane_check = True  # AllGatherIntoTensor's uint32-lane rule (AllgatherSdma rounds instead)
        self._mirror_transit = False  # AllgatherSdma: also leave the result in the transit buffer
        self._registered: dict[int, int] = {}
        self._transit: dict[str, Any] = {}  # "cpu" / "cuda": the output transit buffer, made on first use
        self._retired: list = []  # smaller transit buffers it replaced (their views stay valid)
        self._async: Optional[tuple[float, Any]] = None  # (start time, CUDA event or None)

    def my_pe(self) -> int:
        return self._me

    def npes(self) -> int:
        return self._n

    # ------------------------------------------------------------------ calls

    def __call__(self, sendbuff: Any, recvbuff: Any, sendcount: int, dtype: Any, stream: Any = None) -> bool:
        """``recvbuff`` (npes x sendcount elements) = every PE's ``sendbuff`` in PE order, enqueued on
        ``stream`` for GPU memory. False when the sizes exceed this handle's buffers."""
        return self._run("mori.ccl.AllGatherIntoTensor", sendbuff, recvbuff, sendcount, dtype, stream, None)

    def start_async(self, sendbuff: Any, recvbuff: Any, sendcount: int, dtype: Any, stream: Any = None) -> bool:
        """Enqueue the all-gather and return; :meth:`wait_async` completes it. False while one is
        in progress or when the sizes exceed this handle's buffers."""
        if self._async is not None:
            return False
        started = time.perf_counter()
        event: list = []
        if not self._run(
            "mori.ccl.AllGatherIntoTensor.start_async", sendbuff, recvbuff, sendcount, dtype, stream, event
        ):
            return False
        self._async = (started, event[0] if event else None)
        return True

    def wait_async(self, stream: Any = None) -> float:
        """Complete the started all-gather: ``stream`` (if given) waits for it on the GPU, else the
        host does. Returns the seconds since :meth:`start_async`."""
        if self._async is None:
            raise InvalidUsage("mori.ccl.AllGatherIntoTensor.wait_async: no start_async in progress")
        started, event = self._async
        if event is not None:
            s = _stream_handle(stream)
            if s is None:
                event.synchronize()
            else:
                import torch

                torch.cuda.ExternalStream(s).wait_event(event)
        self._async = None
        return time.perf_counter() - started

    def is_async_in_progress(self) -> bool:
        return self._async is not None

    def cancel_async(self) -> None:
        """Enqueued copies cannot be withdrawn: waits for them on the host and forgets the call."""
        if self._async is not None and self._async[1] is not None:
            self._async[1].synchronize()
        self._async = None

    def resetFlags(self) -> None:  # noqa: N802 (MORI's C++ name)
        """Kept for MORI's API; the engine's flags never need a reset."""

    reset_flags = resetFlags

    # ------------------------------------------------------------------ registration

    def register_output_buffer(self, ptr: Any, size: Optional[int] = None) -> None:
        """Collective in MORI. Recorded; pushes land directly in outputs inside the symmetric heap."""
        addr = _address(ptr, "ptr", "mori.ccl.AllGatherIntoTensor.register_output_buffer")
        if size is None:
            size = ptr.numel() * ptr.element_size() if hasattr(ptr, "numel") else 0
        self._registered[addr] = int(size)

    def deregister_output_buffer(self, ptr: Any) -> None:
        self._registered.pop(_address(ptr, "ptr", "mori.ccl.AllGatherIntoTensor.deregister_output_buffer"), None)

    def is_output_registered(self, ptr: Any) -> bool:
        return _address(ptr, "ptr", "mori.ccl.AllGatherIntoTensor.is_output_registered") in self._registered

    def output_transit_buffer(self, device: str, nbytes: Optional[int] = None) -> Any:
        """The output transit buffer (uint8) for ``device`` ("cpu" or "cuda"); symmetric, so made
        collectively. A call that mirrors its result there makes (or grows) it to what the calls so
        far needed, so a 512 MiB default costs no heap it does not use; asked for with no size
        before any call, it is made with ``output_buffer_size`` bytes, as MORI's."""
        buf = self._transit.get(device)
        if nbytes is None:
            want = len(buf) if buf is not None else self.output_buffer_size
        else:
            want = max(int(nbytes), 1)
        if buf is None or len(buf) < want:
            grown = 2 * len(buf) if buf is not None else 0  # geometric: a few reallocations at most
            size = want if nbytes is None else min(self.output_buffer_size, max(want, grown))
            if device == "cuda":
                from mori.shmem.tensor_utils import mori_shmem_create_tensor

                import torch

                new = mori_shmem_create_tensor((size,), torch.uint8)
            else:
                import mori.shmem as sh

                new = sh.zeros(size, np.uint8)
            if buf is not None:
                if device == "cuda":
                    new[: len(buf)].copy_(buf)
                else:
                    new[: len(buf)] = buf
                self._retired.append(buf)  # views handed out earlier stay valid
            buf = self._transit[device] = new
        return buf

    # ------------------------------------------------------------------ the work

    def _run(
        self,
        caller: str,
        sendbuff: Any,
        recvbuff: Any,
        sendcount: int,
        dtype: Any,
        stream: Any,
        event_out: Optional[list],
    ) -> bool:
        send = _address(sendbuff, "sendbuff", caller)
        dt = data_type(dtype)
        if int(sendcount) < 0:
            raise InvalidArgument(f"{caller}: sendcount must be >= 0, got {sendcount}")
        nbytes = int(sendcount) * size_of(dt)
        if self._lane_check and nbytes % 4:
            raise InvalidArgument(
                f"{caller}: sendcount={sendcount} x {dt.name} is {nbytes} bytes per PE, not a "
                f"multiple of 4 (MORI's copy engine moves uint32 lanes)"
            )
        if nbytes > self.input_buffer_size or self._n * nbytes > self.output_buffer_size:
            return False
        device = self._device_of(send, "sendbuff", caller)
        transit = None
        if self.copy_output_to_user:
            recv = _address(recvbuff, "recvbuff", caller)
            if self._device_of(recv, "recvbuff", caller) != device:
                raise InvalidArgument(
                    f"{caller}: sendbuff and recvbuff are in different memories "
                    f"({'GPU' if device >= 0 else 'host'} and "
                    f"{'host' if device >= 0 else 'GPU'})"
                )
            out = self._view(recv, self._n * nbytes, device)
            if self.auto_register:
                self._registered.setdefault(recv, self._n * nbytes)
            if self._mirror_transit:
                transit = self.output_transit_buffer("cuda" if device >= 0 else "cpu", self._n * nbytes)[
                    : self._n * nbytes
                ]
        else:
            out = self.output_transit_buffer("cuda" if device >= 0 else "cpu", self._n * nbytes)[: self._n * nbytes]
        inp = self._view(send, nbytes, device)
        if device < 0:
            all_gather_into_tensor(out, inp)
            if transit is not None:
                transit[:] = out
            return True
        import torch

        s = _stream_handle(stream)
        with torch.cuda.stream(torch.cuda.ExternalStream(s)) if s is not None else contextlib.nullcontext():
            all_gather_into_tensor(out, inp)
            if transit is not None:
                transit.copy_(out)
            if event_out is not None:
                event_out.append(torch.cuda.Event())
                event_out[0].record()
        return True

    def _device_of(self, addr: int, name: str, caller: str) -> int:
        """This PE's GPU when ``addr`` is GPU memory, else -1 (host memory)."""
        if not _C.shmem.built_with_cuda() or not _C.shmem.gpu_bound():
            return -1
        dev = int(_C.shmem.pointer_device(addr))
        if dev >= 0 and dev != int(_C.shmem.gpu_device()):
            raise InvalidArgument(
                f"{caller}: {name} is memory of cuda:{dev}, but this PE's GPU is cuda:{_C.shmem.gpu_device()}"
            )
        return dev

    @staticmethod
    def _view(addr: int, nbytes: int, device: int) -> Any:
        """A uint8 view of ``nbytes`` at ``addr`` (no copy, no ownership)."""
        if device >= 0:
            import torch

            from mori.shmem.tensor_utils import wrap_device_pointer

            return wrap_device_pointer(addr, nbytes, torch.uint8, (nbytes,))
        if nbytes == 0:
            return np.empty(0, np.uint8)
        import ctypes

        return np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(addr))


class AllgatherSdma:
    """MORI's tensor-facing all-gather: ``AllgatherSdma(my_pe, npes, input_buffer_size=None,
    output_buffer_size=None, transit_buffer_size=None, copy_output_to_user=True)``, then
    ``ag(input, output, count, stream=None)`` with ``count`` elements of ``input`` per PE."""

    def __init__(
        self,
        my_pe: int,
        npes: int,
        input_buffer_size: Optional[int] = None,
        output_buffer_size: Optional[int] = None,
        transit_buffer_size: Optional[int] = None,
        copy_output_to_user: bool = True,
    ) -> None:
        self.my_pe, self.npes = my_pe, npes
        self._impl = AllGatherIntoTensor(
            my_pe,
            npes,
            copy_output_to_user=copy_output_to_user,
            input_buffer_size=input_buffer_size,
            output_buffer_size=output_buffer_size,
            transit_buffer_size=transit_buffer_size,
        )
        self._impl._lane_check = False  # MORI's AllgatherSdma rounds the bytes up to lanes instead
        self._impl._mirror_transit = True  # its users read the transit buffer after a copy-out call

    def __call__(self, input_data: Any, output_data: Any, count: int, stream: Any = None) -> bool:
        return self._impl(input_data, output_data, count, _dtype_of(input_data), stream)

    def start_async(self, input_data: Any, output_data: Any, count: int, stream: Any = None) -> bool:
        return self._impl.start_async(input_data, output_data, count, _dtype_of(input_data), stream)

    def wait_async(self, stream: Any = None) -> float:
        return self._impl.wait_async(stream)

    def is_async_in_progress(self) -> bool:
        return self._impl.is_async_in_progress()

    def cancel_async(self) -> None:
        self._impl.cancel_async()

    def reset_flags(self) -> None:
        self._impl.reset_flags()

    def get_output_transit_buffer(self, dtype: Any = None, device: Any = None) -> Any:
        """The output transit buffer as a tensor of ``dtype`` (default uint32, as in MORI) on the
        GPU, or on the host with ``device="cpu"``."""
        import torch

        dev = "cpu" if device is not None and str(device) == "cpu" else "cuda"
        if dev == "cuda" and not _C.shmem.gpu_bound():
            dev = "cpu"
        buf = self._impl.output_transit_buffer(dev)
        t = buf if dev == "cuda" else torch.from_numpy(buf)
        dtype = torch.uint32 if dtype is None else dtype
        usable = t.numel() // dtype.itemsize * dtype.itemsize
        return t[:usable].view(dtype)

    def register_output_buffer(self, tensor: Any) -> None:
        self._impl.register_output_buffer(tensor)

    def deregister_output_buffer(self, tensor: Any) -> None:
        self._impl.deregister_output_buffer(tensor)

    def is_output_registered(self, tensor: Any) -> bool:
        return self._impl.is_output_registered(tensor)


def _dtype_of(t: Any) -> DataType:
    if not hasattr(t, "dtype"):
        raise InvalidArgument(f"mori.ccl.AllgatherSdma: input_data must be a tensor, got {type(t).__name__}")
    return data_type(t.dtype)
