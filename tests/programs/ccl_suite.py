# SPDX-License-Identifier: MIT
"""The host collectives' correctness matrix, run on every PE of a job:

    mori run -n 4 python ccl_suite.py [--quick]

Every PE seeds the same generator, so each can rebuild every PE's input and check its own
output exactly (data movement bit-exact, reductions within a per-dtype tolerance).
Exits non-zero with the failing check on any mismatch.
"""

from __future__ import annotations

import sys

import numpy as np
import torch

import mori.ccl as ccl
import mori.shmem as sh
from cases import run_cases
from mori.core.errors import InvalidArgument

DTYPES = [
    torch.bool,
    torch.int8,
    torch.uint8,
    torch.int16,
    torch.uint16,
    torch.int32,
    torch.uint32,
    torch.int64,
    torch.uint64,
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
    torch.complex64,
    torch.complex128,
]
REAL = [d for d in DTYPES if not d.is_complex]
# Reductions: relative/absolute tolerance against a float64 reference (n <= 8 terms).
TOL = {
    torch.float16: (2e-3, 2e-3),
    torch.bfloat16: (1.6e-2, 1.6e-2),
    torch.float32: (1e-5, 1e-5),
    torch.float64: (1e-12, 1e-12),
    torch.complex64: (1e-5, 1e-5),
    torch.complex128: (1e-12, 1e-12),
}


def expect(cond: bool, what: str) -> None:
    if not cond:
        raise AssertionError(f"PE {sh.my_pe()}: {what}")


def rand(rng: np.random.Generator, dtype: torch.dtype, count: int) -> torch.Tensor:
    """Random values of `dtype` (full range for integers, so sums wrap)."""
    if dtype == torch.bool:
        return torch.from_numpy(rng.integers(0, 2, count).astype(np.bool_))
    if dtype.is_complex:
        re = rng.standard_normal(count) + 1j * rng.standard_normal(count)
        return torch.from_numpy(re.astype(np.complex64 if dtype == torch.complex64 else np.complex128))
    if dtype.is_floating_point:
        return torch.from_numpy(rng.standard_normal(count) * 10).to(dtype)
    info = torch.iinfo(dtype)
    lo, hi = max(info.min, -(2**62)), min(info.max, 2**62)
    return (
        torch.from_numpy(rng.integers(lo, hi, count, dtype=np.int64, endpoint=True)).to(dtype)
        if dtype != torch.uint64
        else torch.from_numpy(rng.integers(0, 2**63, count, dtype=np.uint64))
    )


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit-exact equality, compared as bytes."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return np.array_equal(a.contiguous().view(torch.uint8).numpy(), b.contiguous().view(torch.uint8).numpy())


def reference(inputs: list[torch.Tensor], op: str) -> torch.Tensor:
    dtype = inputs[0].dtype
    if dtype == torch.bool:
        stack = torch.stack(inputs)
        return stack.all(0) if op == "min" else stack.any(0)
    if dtype.is_floating_point or dtype.is_complex:
        wide = torch.stack([x.to(torch.complex128 if dtype.is_complex else torch.float64) for x in inputs])
    else:  # integers: numpy wraps the same way the reduction does
        arrs = [x.numpy() for x in inputs]
        acc = arrs[0].copy()
        for a in arrs[1:]:
            acc = (acc + a) if op == "sum" else (np.maximum(acc, a) if op == "max" else np.minimum(acc, a))
        return torch.from_numpy(acc)
    if op == "sum":
        return wide.sum(0)
    return wide.max(0).values if op == "max" else wide.min(0).values


def close(got: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype, op: str) -> bool:
    if dtype in TOL and op == "sum":
        rtol, atol = TOL[dtype]
        return torch.allclose(got.to(ref.dtype), ref, rtol=rtol, atol=atol)
    if dtype.is_floating_point:  # max/min pick an input: exact
        return same(got, ref.to(dtype))
    return same(got, ref)


def check_allgather(rng, me, n, sizes) -> None:
    for dtype in DTYPES:
        for count in sizes:
            xs = [rand(rng, dtype, count) for _ in range(n)]
            out = torch.empty(n * count, dtype=dtype)
            ccl.all_gather_into_tensor(out, xs[me])
            expect(same(out, torch.cat(xs)), f"all_gather_into_tensor {dtype} x{count}")
    # Symmetric input (read in place by peers), 2-D shapes, all_gather_single, list form.
    x = sh.tensor((37, 3), torch.float32)
    vals = [torch.from_numpy(rng.standard_normal((37, 3))).float() for _ in range(n)]
    x.copy_(vals[me])
    before = ccl.stats()["host"]["zero_copy"]
    out = torch.empty((n * 37, 3))
    ccl.all_gather_single(out, x)
    expect(same(out, torch.cat(vals)), "all_gather_single, symmetric input")
    expect(ccl.stats()["host"]["zero_copy"] == before + 1, "symmetric input was not read in place")
    x.fill_(-1)  # may be rewritten at once: the call ended with everyone done reading
    sh.free(x)
    lst = [torch.empty(5, dtype=torch.int64) for _ in range(n)]
    ccl.all_gather(lst, torch.arange(5) + 100 * me)
    expect(all(torch.equal(lst[p], torch.arange(5) + 100 * p) for p in range(n)), "all_gather (list)")
    # numpy arrays work too
    a = np.full(4, me, np.int32)
    o = np.empty(4 * n, np.int32)
    ccl.all_gather_into_tensor(o, a)
    expect(np.array_equal(o, np.repeat(np.arange(n, dtype=np.int32), 4)), "numpy all_gather")


def check_broadcast(rng, me, n, sizes) -> None:
    for dtype in DTYPES:
        for count in sizes:
            root = int(rng.integers(0, n))
            data = rand(rng, dtype, count)
            buf = data.clone() if me == root else torch.zeros(count, dtype=dtype)
            ccl.broadcast(buf, src=root)
            expect(same(buf, data), f"broadcast {dtype} x{count} from {root}")
    buf = sh.tensor(100, torch.float64)  # symmetric root buffer, read in place
    if me == n - 1:
        buf.copy_(torch.arange(100, dtype=torch.float64))
    ccl.broadcast(buf, src=n - 1)
    expect(torch.equal(buf, torch.arange(100, dtype=torch.float64)), "broadcast symmetric")
    sh.free(buf)


def check_reductions(rng, me, n, sizes) -> None:
    sizes = [s for s in sizes if s < 10000] + [5003]  # 5003 x 8 bytes spans several 4 KiB chunks
    for dtype in DTYPES:
        ops = ["sum"] if dtype.is_complex else ["sum", "max", "min"]
        for op in ops:
            for count in sizes:
                xs = [rand(rng, dtype, count) for _ in range(n)]
                ref = reference(xs, op)
                t = xs[me].clone()
                ccl.all_reduce(t, op=op)
                expect(close(t, ref, dtype, op), f"all_reduce {op} {dtype} x{count}")
                # every PE holds the same bits (one PE reduced each element)
                chk = torch.empty(n * count, dtype=dtype)
                ccl.all_gather_into_tensor(chk, t)
                expect(
                    all(same(chk[p * count : (p + 1) * count], t) for p in range(n)),
                    f"all_reduce {op} {dtype}: PEs disagree",
                )
                # reduce-scatter: block me of the op over n*count inputs
                ys = [rand(rng, dtype, n * count) for _ in range(n)]
                ref_rs = reference(ys, op)[me * count : (me + 1) * count]
                out = torch.empty(count, dtype=dtype)
                ccl.reduce_scatter_tensor(out, ys[me], op=op)
                expect(close(out, ref_rs, dtype, op), f"reduce_scatter {op} {dtype} x{count}")
    # symmetric input to all_reduce and reduce_scatter, torch.distributed's ReduceOp
    import torch.distributed as dist

    s = sh.tensor(n * 10, torch.float64)
    s.copy_(torch.arange(n * 10, dtype=torch.float64) * (me + 1))
    out = torch.empty(10, dtype=torch.float64)
    ccl.reduce_scatter_single(out, s, op=dist.ReduceOp.SUM)
    tri = n * (n + 1) / 2
    expect(torch.equal(out, torch.arange(me * 10, me * 10 + 10, dtype=torch.float64) * tri), "reduce_scatter sym")
    ccl.all_reduce(s, op=dist.ReduceOp.MAX)
    expect(torch.equal(s, torch.arange(n * 10, dtype=torch.float64) * n), "all_reduce symmetric max")
    sh.free(s)


def check_alltoall(rng, me, n, sizes) -> None:
    for dtype in DTYPES:
        for rows in sizes:
            rows = max(rows // 16, 1)
            xs = [rand(rng, dtype, n * rows * 3).reshape(n * rows, 3) for _ in range(n)]
            out = torch.empty(n * rows, 3, dtype=dtype)
            ccl.all_to_all_single(out, xs[me])
            want = torch.cat([xs[p][me * rows : (me + 1) * rows] for p in range(n)])
            expect(same(out, want), f"all_to_all_single {dtype} rows={rows}")
    # uneven splits: PE i sends split[i][j] rows to PE j
    split = rng.integers(0, 9, size=(n, n))
    xs = [torch.from_numpy(rng.standard_normal((int(split[p].sum()), 2))) for p in range(n)]
    out = torch.empty(int(split[:, me].sum()), 2, dtype=torch.float64)
    ccl.all_to_all_single(out, xs[me], output_split_sizes=split[:, me].tolist(), input_split_sizes=split[me].tolist())
    offs = [np.concatenate([[0], np.cumsum(split[p])]) for p in range(n)]
    want = torch.cat([xs[p][offs[p][me] : offs[p][me + 1]] for p in range(n)])
    expect(torch.equal(out, want), "all_to_all_single uneven")


def check_errors(me, n) -> None:
    def raises(exc, fn, what, needle=""):
        try:
            fn()
        except exc as e:
            expect(needle in str(e), f"{what}: message {e!s} lacks {needle!r}")
            return
        raise AssertionError(f"PE {me}: {what} did not raise {exc.__name__}")

    x = torch.zeros(8)
    raises(
        InvalidArgument, lambda: ccl.all_gather_into_tensor(torch.empty(8 * n + 1), x), "wrong output size", "output"
    )
    raises(
        InvalidArgument,
        lambda: ccl.all_gather_into_tensor(torch.empty(8 * n, dtype=torch.int32), x),
        "dtype mismatch",
        "dtype",
    )
    raises(InvalidArgument, lambda: ccl.all_reduce(torch.zeros(4, 4).t(), op="sum"), "non-contiguous", "contiguous")
    raises(
        InvalidArgument,
        lambda: ccl.all_reduce(torch.zeros(4, dtype=torch.complex64), op="max"),
        "complex max",
        "complex",
    )
    raises(InvalidArgument, lambda: ccl.all_reduce(x, op="prod"), "unknown op", "op")
    raises(InvalidArgument, lambda: ccl.all_reduce(torch.zeros(2, dtype=torch.float8_e4m3fn)), "fp8", "dtype")
    raises(InvalidArgument, lambda: ccl.broadcast(x, src=n), "bad root", "src")
    raises(InvalidArgument, lambda: ccl.all_gather_into_tensor(torch.empty(8 * n), x, group="g"), "bad group", "group")
    raises(
        InvalidArgument,
        lambda: ccl.all_to_all_single(torch.empty(n + 1), torch.empty(n + 1)),
        "indivisible",
        "divisible",
    )
    # Mismatched arguments across PEs fail on every PE instead of corrupting memory.
    count = 10 + (me % 2)
    if n > 1:
        raises(InvalidArgument, lambda: ccl.all_reduce(torch.zeros(count)), "mismatched counts", "differ between PEs")
    # still usable afterwards
    t = torch.ones(3)
    ccl.all_reduce(t)
    expect(torch.equal(t, torch.full((3,), float(n))), "all_reduce after an error")


def main() -> int:
    quick = "--quick" in sys.argv
    with sh.init() as s:
        me, n = s.my_pe, s.n_pes
        rng = np.random.default_rng(20261129)
        sizes = [7, 1000] if quick else [1, 7, 1000, 40961]
        run_cases(
            me,
            [
                ("allgather", lambda: check_allgather(rng, me, n, sizes)),
                ("broadcast", lambda: check_broadcast(rng, me, n, sizes)),
                ("reductions", lambda: check_reductions(rng, me, n, sizes)),
                ("alltoall", lambda: check_alltoall(rng, me, n, sizes)),
                ("errors", lambda: check_errors(me, n)),
            ],
        )
        st = ccl.stats()["host"]
        expect(st["bytes_direct"] > 0, "no bytes moved through mapped peers")
        ccl.release()
        print(f"PE {me}/{n}: ccl suite ok ({st['calls']} calls, {st['rounds']} rounds)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
