# SPDX-License-Identifier: MIT
"""EP call spans on CPU tensors: with MORI_EP_PROFILE=1 every dispatch/combine is a span of
op.get_debug_time_buf(), and mori.kernel_profiler.export_to_perfetto writes them as a Chrome
JSON trace; the EP guide's profiling snippet runs as written. Launch:
    MORI_EP_PROFILE=1 mori run -n 2 python ep_profile.py OUT_DIR
"""

from __future__ import annotations

import json
import os
import sys

import torch

import mori
import mori.shmem as sh
from mori.kernel_profiler import TraceBuffer, export_to_perfetto
from mori.ops import EpDispatchCombineConfig, EpDispatchCombineOp


def check_moris_options(buf: TraceBuffer, out_dir: str, me: int) -> None:
    """MORI's export_to_perfetto(trace_buffer, filename="trace.json", slot_map, gpu_freq_ghz,
    validate_pairs, sanitize_orphans)."""
    import warnings

    from mori.ep.profiler import _Span

    here = os.getcwd()
    os.chdir(out_dir)
    try:
        os.makedirs(f"pe{me}", exist_ok=True)
        os.chdir(f"pe{me}")
        assert export_to_perfetto(buf) == 4 and os.path.isfile("trace.json")  # MORI's default file name
    finally:
        os.chdir(here)
    path = os.path.join(out_dir, f"named-{me}.json")
    assert export_to_perfetto(buf, filename=path, slot_map={"dispatch": "EP dispatch"}, gpu_freq_ghz=2.1) == 4
    with open(path) as f:
        names = [e["name"] for e in json.load(f)["traceEvents"] if e["ph"] == "X"]
    assert names == ["EP dispatch", "combine"] * 2, names
    try:
        export_to_perfetto(buf, path, gpu_freq_ghz=-1)
    except ValueError as exc:
        assert "gpu_freq_ghz" in str(exc)
    else:
        raise AssertionError("gpu_freq_ghz=-1 was accepted")
    # A span that ends before it starts: warned about, dropped unless sanitize_orphans=False.
    odd = TraceBuffer(me)
    odd.spans.extend(list(buf.spans)[:1] + [_Span("combine", 2000, 1000, None)])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert export_to_perfetto(odd, path) == 1
    assert any("end before they start" in str(w.message) for w in caught), [str(w.message) for w in caught]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert export_to_perfetto(odd, path, validate_pairs=False, sanitize_orphans=False) == 2
    assert not caught, [str(w.message) for w in caught]
    # No events: MORI warns and writes nothing.
    empty = os.path.join(out_dir, f"empty-{me}.json")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert export_to_perfetto(TraceBuffer(me), empty) == 0
    assert caught and not os.path.exists(empty)


def main() -> int:
    out_dir = sys.argv[1]
    with sh.init() as s:
        me, n = s.my_pe, s.n_pes
        cfg = EpDispatchCombineConfig(
            data_type=torch.float32,
            rank=me,
            world_size=n,
            hidden_dim=128,
            scale_dim=0,
            scale_type_size=4,
            max_token_type_size=4,
            max_num_inp_token_per_rank=64,
            num_experts_per_rank=4,
            num_experts_per_token=2,
        )
        op = EpDispatchCombineOp(cfg)
        g = torch.Generator().manual_seed(me)
        for _ in range(2):
            x = torch.randn(64, 128, generator=g)
            idx = torch.randint(0, 4 * n, (64, 2), generator=g, dtype=torch.int32)
            idx[:, 1] = (idx[:, 0] + 1) % (4 * n)
            out = op.dispatch(x, None, None, idx)
            op.combine(out[0], None, idx)
        buf = op.get_debug_time_buf()
        assert isinstance(buf, TraceBuffer) and buf.rank == me
        assert [sp.name for sp in buf.spans] == ["dispatch", "combine"] * 2, [sp.name for sp in buf.spans]
        path = os.path.join(out_dir, f"trace-{me}.json")
        assert export_to_perfetto(buf, path) == 4
        with open(path) as f:
            doc = json.load(f)
        spans = [e for e in doc["traceEvents"] if e["ph"] == "X"]
        assert [e["name"] for e in spans] == ["dispatch", "combine"] * 2
        assert all(e["pid"] == me and e["dur"] > 0 and e["tid"] == "host" for e in spans), spans
        assert all(a["ts"] + a["dur"] <= b["ts"] for a, b in zip(spans, spans[1:])), "spans out of order"
        check_moris_options(buf, out_dir, me)
        # Without the setting an op records nothing.
        os.environ["MORI_EP_PROFILE"] = "0"
        quiet = EpDispatchCombineOp(cfg)
        out = quiet.dispatch(x, None, None, idx)
        quiet.combine(out[0], None, idx)
        assert len(quiet.get_debug_time_buf()) == 0 and len(op.get_debug_time_buf()) == 4
        assert op.get_debug_time_offset().tolist() == [4] and quiet.get_debug_time_offset().tolist() == [0]
        # The EP guide's snippet, as written: this build has no device buffer in mori.cpp.
        if hasattr(mori.cpp, "get_debug_time_buf"):
            trace_buffer = mori.cpp.get_debug_time_buf(op._handle)
            export_to_perfetto(trace_buffer, os.path.join(out_dir, "ep_trace.json"))
        sh.barrier_all()
        print(f"PE {me}/{n}: ep profile ok", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
