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
import os
import time
import warnings
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
    t0_ns: int  # wall clock at the call's start (shared by the PEs of a host)
    t1_ns: int  # wall clock at its return
    gpu: Optional[tuple]  # (start event, end event) for CUDA calls


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
    return {"name": name, "cat": "mori.ep", "ph": "X", "ts": ts_us, "dur": dur_us, "pid": rank, "tid": track}


def export_to_perfetto(
    trace_buffer: Union[TraceBuffer, Sequence[TraceBuffer]],
    filename: str = "trace.json",
    slot_map: Optional[Any] = None,
    gpu_freq_ghz: Optional[float] = None,
    validate_pairs: bool = True,
    sanitize_orphans: bool = True,
) -> int:
    """Write one or several PEs' buffers as a Chrome JSON trace (open it at ui.perfetto.dev; one
    process per PE, a host and a gpu track each). MORI's signature; returns the number of events
    written, 0 (with a warning, nothing written) when there are none, as MORI does.

    * ``slot_map``: names to show, as a dict from our span names (``"dispatch"``, ...) to display
      names; MORI's slot-id maps (int keys, or an enum class of slots) name device slots that our
      spans do not have, so their entries match nothing and names stay as recorded.
    * ``gpu_freq_ghz``: MORI converts device clock ticks with it; our times are already in
      nanoseconds, so it must be None or a positive number and changes nothing.
    * ``validate_pairs``: warn about spans that end before they start (MORI: unmatched begin/end).
    * ``sanitize_orphans``: drop such spans from the file (MORI: orphaned begin/end events).
    """
    buffers = [trace_buffer] if isinstance(trace_buffer, TraceBuffer) else list(trace_buffer)
    for b in buffers:
        if not isinstance(b, TraceBuffer):
            raise TypeError(
                f"export_to_perfetto: expected a TraceBuffer (op.get_debug_time_buf()), got {type(b).__name__}"
            )
    if not isinstance(filename, (str, os.PathLike)):
        raise TypeError(f"export_to_perfetto: filename must be a path, got {type(filename).__name__}")
    if gpu_freq_ghz is not None and not (isinstance(gpu_freq_ghz, (int, float)) and gpu_freq_ghz > 0):
        raise ValueError(f"export_to_perfetto: gpu_freq_ghz must be None or > 0, got {gpu_freq_ghz!r}")
    names = {k: str(v) for k, v in slot_map.items() if isinstance(k, str)} if isinstance(slot_map, dict) else {}
    events = [e for b in buffers for e in b.events()]
    bad = [e for e in events if e["dur"] < 0]
    if bad and validate_pairs:
        warnings.warn(f"export_to_perfetto: {len(bad)} spans end before they start; first: {bad[:3]}")
    if sanitize_orphans:
        events = [e for e in events if e["dur"] >= 0]
    for e in events:
        e["dur"] = max(e["dur"], 0.0)
        base, suffix = (e["name"][:-10], " (enqueue)") if e["name"].endswith(" (enqueue)") else (e["name"], "")
        e["name"] = names.get(base, base) + suffix
    if not events:
        warnings.warn(
            "export_to_perfetto: no trace events in the buffer (was MORI_EP_PROFILE=1 set when the op "
            "was built?); nothing written"
        )
        return 0
    meta = [{"name": "process_name", "ph": "M", "pid": b.rank, "args": {"name": f"PE {b.rank}"}} for b in buffers]
    with open(filename, "w") as f:
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
            if gpu and self._last_path.on_gpu:
                end = torch.cuda.Event(enable_timing=True)
                end.record()
            trace.spans.append(_Span(name, t0, t1, (start, end) if end is not None else None))
            return result

        return call

    return wrap
