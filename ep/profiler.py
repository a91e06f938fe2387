# SPDX-License-Identifier: MIT
"""Spans of EP calls, and their export as a Perfetto (Chrome JSON) trace; also ``mori.kernel_profiler``.

With ``MORI_EP_PROFILE=1`` every ``EpDispatchCombineOp`` records one span per call of
``dispatch``, ``dispatch_recv``, ``combine``, ``combine_recv`` and the standard-MoE forms: host
wall time for CPU tensors, GPU time between CUDA events on the call's stream for CUDA tensors
(calls captured into a CUDA graph are not recorded). ``op.get_debug_time_buf()`` returns the
spans so far; :func:`export_to_perfetto` writes them (one PE's, or a list of PEs') for
ui.perfetto.dev. Without the setting nothing is recorded and ``get_debug_time_buf`` returns an
empty buffer. (MORI's profiler builds record per-warp device timestamps instead; their buffer
is a tensor, ours a :class:`TraceBuffer`.)
"""
from __future__ import annotations

import collections
import functools
import json
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence, Union

import torch

from mori.core.env import setting

MAX_SPANS = 1 << 16  # the newest spans are kept


def enabled() -> bool:
    """Whether MORI_EP_PROFILE is on (read when an op is built)."""
    return bool(setting("MORI_EP_PROFILE"))


@dataclass
class _Span:
    name: str
    t0_ns: int              # wall clock at the call's start (shared by the PEs of a host)
    t1_ns: int              # wall clock at its return
    gpu: Optional[tuple]    # (start event, end event) for CUDA calls


@dataclass
class TraceBuffer:
    """One PE's recorded spans (what ``op.get_debug_time_buf()`` returns)."""

    rank: int
    spans: collections.deque = field(default_factory=lambda: collections.deque(maxlen=MAX_SPANS))
    _gpu_base: Optional[tuple] = None  # (wall ns, CUDA event) taken together: GPU times map onto wall time

    def __len__(self) -> int:
        return len(self.spans)

    def events(self) -> list[dict]:
        """Chrome-trace events (``ph: "X"``, microseconds). Waits for the recorded CUDA events."""
        out = []
        for s in self.spans:
            if s.gpu is None:
                out.append(_event(s.name, self.rank, "host", s.t0_ns / 1e3, (s.t1_ns - s.t0_ns) / 1e3))
                continue
            base_ns, base_ev = self._gpu_base
            start, end = s.gpu
            end.synchronize()
            t0 = base_ns / 1e3 + base_ev.elapsed_time(start) * 1e3
            out.append(_event(s.name, self.rank, "gpu", t0, start.elapsed_time(end) * 1e3))
            out.append(_event(s.name + " (enqueue)", self.rank, "host", s.t0_ns / 1e3, (s.t1_ns - s.t0_ns) / 1e3))
        return out


def _event(name: str, rank: int, track: str, ts_us: float, dur_us: float) -> dict:
    return {"name": name, "cat": "mori.ep", "ph": "X", "ts": ts_us, "dur": max(dur_us, 0.0), "pid": rank,
            "tid": track}


def export_to_perfetto(trace_buffer: Union[TraceBuffer, Sequence[TraceBuffer]], path: str) -> int:
    """Write one or several PEs' buffers as a Chrome JSON trace (open it at ui.perfetto.dev; one
    process per PE, a host and a gpu track each). Returns the number of events written."""
    buffers = [trace_buffer] if isinstance(trace_buffer, TraceBuffer) else list(trace_buffer)
    for b in buffers:
        if not isinstance(b, TraceBuffer):
            raise TypeError(f"export_to_perfetto: expected a TraceBuffer (op.get_debug_time_buf()), got {type(b).__name__}")
    events = [e for b in buffers for e in b.events()]
    meta = [{"name": "process_name", "ph": "M", "pid": b.rank, "args": {"name": f"PE {b.rank}"}} for b in buffers]
    with open(path, "w") as f:
        json.dump({"traceEvents": meta + events, "displayTimeUnit": "ns"}, f)
    return len(events)


def traced(name: str) -> Callable:
    """Records a span of the decorated ``EpDispatchCombineOp`` method when the op profiles."""

    def wrap(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def call(self, *args: Any, **kwargs: Any) -> Any:
            trace: Optional[TraceBuffer] = self._trace
            if trace is None:
                return fn(self, *args, **kwargs)
            gpu = self._gpu is not None and not torch.cuda.is_current_stream_capturing()
            start = end = None
            if gpu:
                if trace._gpu_base is None:
                    base = torch.cuda.Event(enable_timing=True)
                    base.record()
                    trace._gpu_base = (time.time_ns(), base)
                start = torch.cuda.Event(enable_timing=True)
                start.record()
            t0 = time.time_ns()
            result = fn(self, *args, **kwargs)
            t1 = time.time_ns()
            if gpu and self._last_on_gpu:
                end = torch.cuda.Event(enable_timing=True)
                end.record()
            trace.spans.append(_Span(name, t0, t1, (start, end) if end is not None else None))
            return result

        return call

    return wrap
