# SPDX-License-Identifier: MIT
"""Route DeepSpeed ZeRO-3's parameter all-gathers through MORI.

    import deepspeed, mori.apps.deepspeed as mds
    deepspeed.init_distributed(...)
    mds.install()            # or: MORI_DEEPSPEED=1 and `import mori.apps.deepspeed`
    ...train...
    print(mds.stats())       # how many all-gathers MORI handled, how many fell back and why
    mds.uninstall()          # DeepSpeed's own functions are back

ZeRO-3 fetches parameters with ``deepspeed.comm.allgather_fn`` (``all_gather_coalesced``) and
``deepspeed.comm.all_gather_into_tensor`` (single-parameter and secondary-partition paths);
DeepSpeed looks both up on the ``deepspeed.comm`` module at call time, so replacing those two
attributes catches every parameter all-gather. A call goes to ``mori.ccl`` when it is on the
world group, both tensors are contiguous with a supported dtype on cpu or cuda, the output is
world_size x input, and the input has at most ``MORI_DEEPSPEED_MAX_NUMEL`` elements; every
other call goes to DeepSpeed's own function unchanged. Both are counted. The data is the
same bytes either way, so training is bit-identical with and without the hook.

The shmem runtime is started on first use if it is not running (collective: ZeRO-3 calls
the all-gather on every rank with the same eligibility).
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from mori.core.errors import InvalidUsage

_HOOKED = ("allgather_fn", "all_gather_into_tensor")


@dataclass
class _State:
    originals: dict[str, Callable] = field(default_factory=dict)
    handled: Counter = field(default_factory=Counter)
    fallback: Counter = field(default_factory=Counter)
    reasons: Counter = field(default_factory=Counter)
    max_numel: int = 0


_state: Optional[_State] = None
_lock = threading.Lock()


class _CudaWork:
    """Work for a CUDA all-gather enqueued on a stream: wait() orders the waiter's current
    stream after it without blocking the CPU (as NCCL's Work.wait does)."""

    def __init__(self, event: Any) -> None:
        self._event = event

    def wait(self, timeout: Any = None) -> bool:
        import torch

        torch.cuda.current_stream().wait_event(self._event)
        return True

    def is_completed(self) -> bool:
        return self._event.query()


class _DoneWork:
    def wait(self, timeout: Any = None) -> bool:
        return True

    def is_completed(self) -> bool:
        return True


def installed() -> bool:
    return _state is not None


def install(max_numel: Optional[int] = None) -> None:
    """Wrap ``deepspeed.comm.allgather_fn`` and ``deepspeed.comm.all_gather_into_tensor``.
    Idempotent. ``max_numel`` defaults to MORI_DEEPSPEED_MAX_NUMEL."""
    global _state
    import deepspeed.comm as dscomm

    from mori.core.env import setting

    with _lock:
        if _state is not None:
            return
        st = _State(max_numel=int(max_numel if max_numel is not None else setting("MORI_DEEPSPEED_MAX_NUMEL")))
        for name in _HOOKED:
            original = getattr(dscomm, name)
            st.originals[name] = original
            setattr(dscomm, name, _make_wrapper(name, original))
        _state = st


def uninstall() -> dict:
    """Put DeepSpeed's functions back; returns the final :func:`stats`."""
    global _state
    import deepspeed.comm as dscomm

    with _lock:
        if _state is None:
            return _empty_stats()
        out = stats()
        for name, original in _state.originals.items():
            setattr(dscomm, name, original)
        _state = None
        return out


def _empty_stats() -> dict:
    return {"installed": False, "handled": {}, "fallback": {}, "fallback_reasons": {}}


def stats() -> dict:
    """Counters since install(): all-gathers MORI handled and fallbacks, per hooked function."""
    if _state is None:
        return _empty_stats()
    return {
        "installed": True,
        "handled": dict(_state.handled),
        "fallback": dict(_state.fallback),
        "fallback_reasons": dict(_state.reasons),
        "max_numel": _state.max_numel,
    }


def _make_wrapper(name: str, original: Callable) -> Callable:
    def hooked(output_tensor, tensor=None, group=None, async_op=False, *args, **kwargs):
        # DeepSpeed's names: allgather_fn(output_tensor, input_tensor, ...),
        # all_gather_into_tensor(output_tensor, tensor, ...).
        if tensor is None:
            tensor = kwargs.pop("input_tensor", None)
        st = _state
        reason = _ineligible(output_tensor, tensor, group, st) if st is not None else "uninstalled"
        if reason is None:
            work = _run(output_tensor, tensor)
            st.handled[name] += 1
            return work if async_op else None
        if st is not None:
            st.fallback[name] += 1
            st.reasons[reason] += 1
        return original(output_tensor, tensor, group, async_op, *args, **kwargs)

    hooked.__name__ = f"mori_{name}"
    hooked.__wrapped__ = original
    return hooked


def _ineligible(out: Any, inp: Any, group: Any, st: _State) -> Optional[str]:
    """None when MORI can take the call, else a short reason (the fallback counter's key)."""
    import torch
    import torch.distributed as dist

    from mori.collectives.dtypes import data_type

    if not isinstance(out, torch.Tensor) or not isinstance(inp, torch.Tensor):
        return "not tensors"
    if not dist.is_available() or not dist.is_initialized():
        return "torch.distributed not initialized"
    world = dist.get_world_size()
    if group is not None and group is not dist.group.WORLD:
        try:
            if list(dist.get_process_group_ranks(group)) != list(range(world)):
                return "sub-group"
        except Exception:
            return "unknown group"
    if out.device.type != inp.device.type or out.device.type not in ("cpu", "cuda"):
        return f"device {out.device.type}"
    if out.device.type == "cuda":
        from mori.collectives import gpu

        if not gpu.available():
            return "built without CUDA"
    if not out.is_contiguous() or not inp.is_contiguous():
        return "non-contiguous"
    if out.dtype != inp.dtype:
        return "dtype mismatch"
    try:
        data_type(inp.dtype)
    except Exception:
        return f"dtype {inp.dtype}"
    if inp.numel() > st.max_numel:
        return "over MORI_DEEPSPEED_MAX_NUMEL"
    if out.numel() != world * inp.numel():
        return "output size"
    return None


def _ensure_shmem() -> None:
    """Start the shmem runtime over torch's world group if nobody did (collective)."""
    import torch
    import torch.distributed as dist

    import mori.shmem as sh

    if sh.shmem_initialized():
        if sh.shmem_npes() != dist.get_world_size() or sh.shmem_mype() != dist.get_rank():
            raise InvalidUsage(
                f"mori.apps.deepspeed: shmem runs PE {sh.shmem_mype()} of {sh.shmem_npes()} but "
                f"torch.distributed is rank {dist.get_rank()} of {dist.get_world_size()}"
            )
        return
    torch._C._distributed_c10d._register_process_group("mori-deepspeed", dist.group.WORLD)
    sh.shmem_torch_process_group_init("mori-deepspeed")


def _run(out: Any, inp: Any) -> Any:
    import torch

    import mori.ccl as ccl

    _ensure_shmem()
    ccl.all_gather_into_tensor(out, inp)
    if out.device.type == "cuda":
        event = torch.cuda.Event()
        event.record(torch.cuda.current_stream(out.device))
        return _CudaWork(event)
    return _DoneWork()


def _install_from_env() -> None:
    from mori.core.env import setting

    if setting("MORI_DEEPSPEED"):
        install()


_install_from_env()
