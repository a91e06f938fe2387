# SPDX-License-Identifier: MIT
"""MORI's class API of mori.ccl on CPU memory: AllGatherIntoTensor (raw addresses, count, DataType,
stream — DeepSpeed's MORI hook) and AllgatherSdma (tensors), under `mori run -n N`.

Every PE rebuilds every PE's input from the seeds, so outputs are checked byte for byte.
Prints "ccl handles ok" per PE.
"""

from __future__ import annotations

import sys

import numpy as np
import torch

import mori.ccl as ccl
import mori.shmem as sh
from mori.core.errors import InvalidArgument, InvalidUsage

TORCH = {
    ccl.DataType.Int8: torch.int8,
    ccl.DataType.Uint8: torch.uint8,
    ccl.DataType.Int16: torch.int16,
    ccl.DataType.Uint16: torch.uint16,
    ccl.DataType.Int32: torch.int32,
    ccl.DataType.Uint32: torch.uint32,
    ccl.DataType.Int64: torch.int64,
    ccl.DataType.Uint64: torch.uint64,
    ccl.DataType.Float16: torch.float16,
    ccl.DataType.BFloat16: torch.bfloat16,
    ccl.DataType.Float32: torch.float32,
    ccl.DataType.Float64: torch.float64,
}


def expect(cond: bool, what: str) -> None:
    if not cond:
        raise AssertionError(f"PE {sh.my_pe()}: {what}")


def payload(pe: int, dt: ccl.DataType, count: int, salt: int) -> torch.Tensor:
    """PE pe's input: random bytes (any bit pattern, NaNs included) seen as dtype dt."""
    raw = np.random.default_rng([salt, int(dt), pe, count]).integers(0, 256, count * ccl.size_of(dt), dtype=np.uint8)
    return torch.from_numpy(raw).view(TORCH[dt]).clone()


def expected(n: int, dt: ccl.DataType, count: int, salt: int) -> np.ndarray:
    return np.concatenate([payload(p, dt, count, salt).view(torch.uint8).numpy() for p in range(n)])


def raises(exc: type, fn) -> str:
    try:
        fn()
    except exc as e:
        return str(e)
    raise AssertionError(f"PE {sh.my_pe()}: expected {exc.__name__}")


def main() -> int:
    with sh.init() as s:
        me, n = s.my_pe, s.n_pes
        ag = ccl.AllGatherIntoTensor(me, n, 1 << 20, n << 20)  # DeepSpeed's call: input and output sizes
        expect(ag.my_pe() == me and ag.npes() == n, "my_pe()/npes()")
        for salt, count in enumerate((4, 12, 1004)):  # per-PE bytes: whole uint32 lanes (MORI's rule)
            for dt in TORCH:
                x = payload(me, dt, count, salt)
                out = torch.full((n * count * ccl.size_of(dt),), 0xA5, dtype=torch.uint8).view(TORCH[dt])
                ok = ag(x.data_ptr(), out.data_ptr(), count, dt, 0)  # raw addresses, a stream argument
                expect(ok is True, f"call returned {ok}")
                got = out.view(torch.uint8).numpy()
                expect(np.array_equal(got, expected(n, dt, count, salt)), f"{dt.name} x {count} (addresses)")
                out.view(torch.uint8).fill_(0)
                expect(ag(x, out, count, dt) is True, "tensors")
                expect(
                    np.array_equal(out.view(torch.uint8).numpy(), expected(n, dt, count, salt)),
                    f"{dt.name} x {count} (tensors)",
                )
        # Sizes past the handle's buffers: False, output untouched (callers fall back).
        small = ccl.AllGatherIntoTensor(me, n, 64, 64 * n)
        x = payload(me, ccl.DataType.Float32, 17, 9)
        out = torch.zeros(17 * n)
        expect(small(x, out, 17, ccl.DataType.Float32) is False, "oversize input accepted")
        expect(bool((out == 0).all()), "oversize call wrote the output")
        expect(small(x, out, 16, ccl.DataType.Float32) is True, "input of exactly the buffer size refused")
        # AllgatherSdma: tensors, elements of the input per PE; the default 512 MiB transit.
        sd = ccl.AllgatherSdma(me, n)
        x = payload(me, ccl.DataType.BFloat16, 777, 5)
        out = torch.empty(777 * n, dtype=torch.bfloat16)
        expect(sd(x, out, 777) is True, "AllgatherSdma call")
        expect(
            np.array_equal(out.view(torch.uint8).numpy(), expected(n, ccl.DataType.BFloat16, 777, 5)),
            "AllgatherSdma output",
        )
        # Async halves.
        expect(sd.start_async(x, out.zero_(), 777) is True and sd.is_async_in_progress(), "start_async")
        expect(sd.start_async(x, out, 777) is False, "second start_async while one is in progress")
        took = sd.wait_async()
        expect(isinstance(took, float) and took >= 0 and not sd.is_async_in_progress(), "wait_async")
        expect(
            np.array_equal(out.view(torch.uint8).numpy(), expected(n, ccl.DataType.BFloat16, 777, 5)), "async output"
        )
        raises(InvalidUsage, sd.wait_async)
        sd.cancel_async()
        sd.reset_flags()
        # copy_output_to_user=False: the result stays in the output transit buffer.
        keep = ccl.AllgatherSdma(me, n, transit_buffer_size=1 << 20, copy_output_to_user=False)
        x = payload(me, ccl.DataType.Int32, 100, 6)
        untouched = torch.zeros(100 * n, dtype=torch.int32)
        expect(keep(x, untouched, 100) is True, "transit call")
        expect(bool((untouched == 0).all()), "copy_output_to_user=False wrote the user output")
        transit = keep.get_output_transit_buffer(torch.int32, device="cpu")
        expect(
            np.array_equal(transit[: 100 * n].view(torch.uint8).numpy(), expected(n, ccl.DataType.Int32, 100, 6)),
            "transit buffer contents",
        )
        # A registered, symmetric output: written in place.
        sym = sh.zeros(50 * n, np.float64)
        x = payload(me, ccl.DataType.Float64, 50, 7)
        sd.register_output_buffer(torch.from_numpy(sym))
        expect(sd.is_output_registered(torch.from_numpy(sym)), "registration recorded")
        expect(sd(x, torch.from_numpy(sym), 50) is True, "symmetric output call")
        expect(np.array_equal(sym.view(np.uint8), expected(n, ccl.DataType.Float64, 50, 7)), "symmetric output")
        sd.deregister_output_buffer(torch.from_numpy(sym))
        expect(not sd.is_output_registered(torch.from_numpy(sym)), "deregistration")
        # MORI's auto_register= (positional after copy_output_to_user too): every call's output is registered.
        auto = ccl.AllGatherIntoTensor(me, n, 1 << 16, n << 16, True, True)
        expect(auto.auto_register and auto.copy_output_to_user, "positional copy_output_to_user, auto_register")
        x = payload(me, ccl.DataType.Int16, 6, 11)
        out = torch.zeros(6 * n, dtype=torch.int16)
        expect(not auto.is_output_registered(out), "registered before any call")
        expect(auto(x, out, 6, ccl.DataType.Int16) is True, "auto_register call")
        expect(auto.is_output_registered(out) and not ag.is_output_registered(out), "auto_register recorded the output")
        expect(np.array_equal(out.view(torch.uint8).numpy(), expected(n, ccl.DataType.Int16, 6, 11)), "auto output")
        expect(ccl.AllGatherIntoTensor(me, n, 64, 64 * n, auto_register=True).auto_register, "auto_register keyword")
        # A per-PE byte length that is not whole uint32 lanes: MORI raises (a RuntimeError), nothing written.
        for dt, count in ((ccl.DataType.Int8, 3), (ccl.DataType.Float16, 1), (ccl.DataType.Int8, 1001)):
            x = payload(me, dt, count, 12)
            out = torch.full((n * count * ccl.size_of(dt),), 7, dtype=torch.uint8)
            msg = raises(RuntimeError, lambda: ag(x.data_ptr(), out.data_ptr(), count, dt, 0))
            expect("multiple of 4" in msg and "sendcount" in msg, f"lane error names it: {msg}")
            expect(bool((out == 7).all()), "a refused call wrote the output")
        # AllgatherSdma with copy_output_to_user=True also fills its transit buffer (MORI's users read it),
        # bytes rounded to lanes as MORI's wrapper does (an odd count is no error there).
        both = ccl.AllgatherSdma(me, n, transit_buffer_size=1 << 20)
        for count, salt in ((100, 13), (3, 14), (250, 15)):  # growing: the mirror buffer grows collectively
            x = payload(me, ccl.DataType.Uint8, count, salt)
            out = torch.zeros(count * n, dtype=torch.uint8)
            expect(both(x, out, count) is True, "copy-out call")
            want = expected(n, ccl.DataType.Uint8, count, salt)
            expect(np.array_equal(out.numpy(), want), "copy-out user output")
            transit = both.get_output_transit_buffer(torch.uint8, device="cpu")
            expect(np.array_equal(transit[: count * n].numpy(), want), f"copy-out transit buffer ({count} per PE)")
        # Bad arguments raise, naming them.
        expect("my_pe" in raises(InvalidArgument, lambda: ccl.AllGatherIntoTensor(me + 1, n)), "my_pe named")
        expect("npes" in raises(InvalidArgument, lambda: ccl.AllGatherIntoTensor(me, n + 1)), "npes named")
        expect("sendbuff" in raises(InvalidArgument, lambda: ag("x", out, 1, ccl.DataType.Int8)), "sendbuff named")
        expect("sendcount" in raises(InvalidArgument, lambda: ag(x, out, -1, ccl.DataType.Int8)), "sendcount named")
        expect(
            "input_buffer_size" in raises(InvalidArgument, lambda: ccl.AllGatherIntoTensor(me, n, 0, 8)), "sizes named"
        )
        raises(InvalidArgument, lambda: ccl.AllGatherIntoTensor(me, n, 1, 2, 3))
        sh.barrier_all()
        print(f"PE {me}/{n}: ccl handles ok", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
