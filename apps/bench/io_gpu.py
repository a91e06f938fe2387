# SPDX-License-Identifier: MIT
"""``mori bench io --gpu``: MORI-IO on GPU memory between two processes of one node (CUDA IPC
+ copy engine, and GPU memory over the tcp backend), against a device-to-device copy of the
same size measured in the same run (the ceiling for one GPU; a peer copy with two)."""

from __future__ import annotations

import argparse
import multiprocessing as mp
import time
from typing import Sequence

from mori.apps.bench.report import Report
from mori.apps.bench.sizes import size_sweep, size_type


def _target(conn, backend: str, nbytes: int, device: int) -> None:
    import torch

    from mori.io import BackendType, IOEngine, IOEngineConfig, TcpBackendConfig, XgmiBackendConfig

    torch.cuda.set_device(device)
    engine = IOEngine("bench-io-gpu-target", IOEngineConfig("127.0.0.1", 0))
    if backend == "cuda_ipc":
        engine.create_backend(BackendType.XGMI, XgmiBackendConfig())
    else:
        engine.create_backend(BackendType.TCP, TcpBackendConfig(0, False))
    buf = torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{device}")
    conn.send((engine.get_engine_desc().pack(), engine.register_torch_tensor(buf).pack()))
    conn.recv()  # until the initiator is done


# Each figure is the best of 5 rounds, a round at least this long (and `iters` transfers): a
# 64 KiB copy takes microseconds, and 20 of them are one scheduler hiccup.
_MIN_ROUND_S = 0.02


def _best_round(one, iters: int) -> float:
    best = float("inf")
    for _ in range(5):
        n, t0 = 0, time.perf_counter()
        while n < iters or time.perf_counter() - t0 < _MIN_ROUND_S:
            one()
            n += 1
        best = min(best, (time.perf_counter() - t0) / n)
    return best


def _time_io(session, size: int, iters: int) -> float:
    def one() -> None:
        st = session.write(0, 0, size, 0)
        st.Wait()
        if not st.Succeeded():
            raise RuntimeError(st.Message())

    for _ in range(3):
        one()
    return _best_round(one, iters)


def _time_copy(dst, src, size: int, iters: int) -> float:
    import torch

    def one() -> None:
        dst[:size].copy_(src[:size])
        torch.cuda.synchronize()

    for _ in range(3):
        one()
    return _best_round(one, iters)


def targets(rows: list) -> dict:
    """Issue 32's CUDA IPC targets this run decides: >= 0.9 x a device copy from 1 MiB, >= 0.7 x
    at 64 KiB (None: not measured)."""
    ipc = [r for r in rows if r["backend"] == "cuda_ipc"]

    def verdict(sel: list, bound: float):
        return all(r["ratio"] >= bound for r in sel) if sel else None

    return {
        "cuda_ipc >= 0.9 x device copy from 1 MiB": verdict([r for r in ipc if r["MsgSize (B)"] >= 1 << 20], 0.9),
        "cuda_ipc >= 0.7 x device copy at 64 KiB": verdict([r for r in ipc if r["MsgSize (B)"] == 64 << 10], 0.7),
    }


def main(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(prog="mori bench io --gpu")
    p.add_argument("--max-size", type=size_type("--max-size"), default=256 << 20)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--backends", default="cuda_ipc,tcp")
    p.add_argument("--peer-device", type=int, default=0, help="GPU of the target process (0: same GPU)")
    p.add_argument("--json", default=None)
    args = p.parse_args(list(argv))
    import torch

    from mori.io import (
        BackendType,
        EngineDesc,
        IOEngine,
        IOEngineConfig,
        MemoryDesc,
        TcpBackendConfig,
        XgmiBackendConfig,
    )

    sizes = size_sweep(64 << 10, args.max_size, 4)
    src = torch.randint(0, 256, (args.max_size,), dtype=torch.uint8, device="cuda:0")
    dst = (
        torch.empty_like(src)
        if args.peer_device == 0
        else torch.empty(args.max_size, dtype=torch.uint8, device=f"cuda:{args.peer_device}")
    )
    report = Report(
        "io-gpu",
        ["backend", "MsgSize (B)", "GB/s", "copy GB/s", "ratio"],
        meta={"gpu": torch.cuda.get_device_name(0), "peer_device": args.peer_device},
    )
    ctx = mp.get_context("spawn")
    for backend in args.backends.split(","):
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_target, args=(child, backend, args.max_size, args.peer_device))
        proc.start()
        try:
            edesc, mdesc = parent.recv()
            engine = IOEngine("bench-io-gpu-initiator", IOEngineConfig("127.0.0.1", 0))
            if backend == "cuda_ipc":
                engine.create_backend(BackendType.XGMI, XgmiBackendConfig())
            else:
                engine.create_backend(BackendType.TCP, TcpBackendConfig(0, False))
            engine.register_remote_engine(EngineDesc.unpack(edesc))
            local = engine.register_torch_tensor(src)
            remote = MemoryDesc.unpack(mdesc)
            used = engine.backend_for(local, remote)
            session = engine.create_session(local, remote)
            torch.cuda.synchronize()
            for size in sizes:
                iters = args.iters if backend == "cuda_ipc" else max(3, args.iters // 4)
                t_io = _time_io(session, size, iters)
                t_copy = _time_copy(dst, src, size, args.iters)
                report.add(
                    **{
                        "backend": used,
                        "MsgSize (B)": size,
                        "GB/s": size / t_io / 1e9,
                        "copy GB/s": size / t_copy / 1e9,
                        "ratio": t_copy / t_io,
                    }
                )
        finally:
            parent.send("done")
            proc.join(60)
    report.show("MORI-IO on GPU memory, two processes (write, one transfer in flight; best of 5 rounds)")
    report.meta["targets"] = targets(report.rows)
    for name, ok in report.meta["targets"].items():
        print(f"target {name}: {'n/a (not measured)' if ok is None else 'met' if ok else 'MISSED'}")
    print("JSON:", report.save(args.json))
    return 0


if __name__ == "__main__":
    import sys

    raise SystemExit(main(sys.argv[1:]))
