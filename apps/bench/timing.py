# SPDX-License-Identifier: MIT
"""How ``mori bench`` times an operation: untimed warm-up calls first, then timed calls; with
several ranks, each figure is the slowest rank's (a collective is as slow as its last rank)."""

from __future__ import annotations

import statistics
import time
from typing import Callable, Optional, Sequence

Reduce = Callable[[Sequence[float]], list]


def mean_seconds(fn: Callable[[], object], iters: int, warmup: int = 3) -> float:
    """Mean seconds per call of ``fn`` over ``iters`` back-to-back calls, after ``warmup`` calls."""
    for _ in range(warmup):
        fn()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - t0) / iters


def each_call_seconds(
    fn: Callable[[], object], iters: int, warmup: int, barrier: Optional[Callable[[], None]] = None
) -> list[float]:
    """Seconds of each of ``iters`` calls of ``fn``, each started from ``barrier`` (the ranks in
    step), after ``warmup`` calls."""
    for _ in range(warmup):
        if barrier is not None:
            barrier()
        fn()
    times = []
    for _ in range(iters):
        if barrier is not None:
            barrier()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def median_of_slowest(times: Sequence[float], rank_max: Reduce) -> float:
    """The median over iterations of the slowest rank's time of each iteration."""
    return statistics.median(rank_max(times))


def torch_rank_max(dist, group=None, device: str = "cpu") -> Reduce:
    """Element-wise maximum over the ranks of ``group`` (torch.distributed), as float64."""
    import torch

    def rank_max(values: Sequence[float]) -> list:
        t = torch.tensor(list(values), dtype=torch.float64, device=device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
        return t.tolist()

    return rank_max


def torch_rank_mean(dist, world: int, group=None) -> Callable[[float], float]:
    """The mean over the ranks of ``group`` of one value."""
    import torch

    def rank_mean(v: float) -> float:
        t = torch.tensor([v], dtype=torch.float64)
        dist.all_reduce(t, group=group)
        return t.item() / world

    return rank_mean


def slowest(rank_max: Reduce, seconds: float) -> float:
    """The slowest rank's value of one figure."""
    return float(rank_max([seconds])[0])
