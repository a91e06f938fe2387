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
    ccl.DataType.Int8: torch.int8, ccl.DataType.Uint8: torch.uint8, ccl.DataType.Int16: torch.int16,
    ccl.DataType.Uint16: torch.uint16, ccl.DataType.Int32: torch.int32, ccl.DataType.Uint32: torch.uint32,
    ccl.DataType.Int64: torch.int64, ccl.DataType.Uint64: torch.uint64, ccl.DataType.Float16: torch.float16,
    ccl.DataType.BFloat16: torch.bfloat16, ccl.DataType.Float32: torch.float32, ccl.DataType.Float64: torch.float64,
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
        for salt, count in enumerate((1, 3, 1001)):
            for dt in TORCH:
                x = payload(me, dt, count, salt)
                out = torch.full((n * count * ccl.size_of(dt),), 0xA5, dtype=torch.uint8).view(TORCH[dt])
                ok = ag(x.data_ptr(), out.data_ptr(), count, dt, 0)  # raw addresses, a stream argument
                expect(ok is True, f"call returned {ok}")
                got = out.view(torch.uint8).numpy()
                expect(np.array_equal(got, expected(n, dt, count, salt)), f"{dt.name} x {count} (addresses)")
                out.view(torch.uint8).fill_(0)
                expect(ag(x, out, count, dt) is True, "tensors")
                expect(np.array_equal(out.view(torch.uint8).numpy(), expected(n, dt, count, salt)),
                       f"{dt.name} x {count} (tensors)")
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
        expect(np.array_equal(out.view(torch.uint8).numpy(), expected(n, ccl.DataType.BFloat16, 777, 5)),
               "AllgatherSdma output")
        # Async halves.
        expect(sd.start_async(x, out.zero_(), 777) is True and sd.is_async_in_progress(), "start_async")
        expect(sd.start_async(x, out, 777) is False, "second start_async while one is in progress")
        took = sd.wait_async()
        expect(isinstance(took, float) and took >= 0 and not sd.is_async_in_progress(), "wait_async")
        expect(np.array_equal(out.view(torch.uint8).numpy(), expected(n, ccl.DataType.BFloat16, 777, 5)),
               "async output")
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
        expect(np.array_equal(transit[: 100 * n].view(torch.uint8).numpy(), expected(n, ccl.DataType.Int32, 100, 6)),
               "transit buffer contents")
        # A registered, symmetric output: written in place.
        sym = sh.zeros(50 * n, np.float64)
        x = payload(me, ccl.DataType.Float64, 50, 7)
        sd.register_output_buffer(torch.from_numpy(sym))
        expect(sd.is_output_registered(torch.from_numpy(sym)), "registration recorded")
        expect(sd(x, torch.from_numpy(sym), 50) is True, "symmetric output call")
        expect(np.array_equal(sym.view(np.uint8), expected(n, ccl.DataType.Float64, 50, 7)), "symmetric output")
        sd.deregister_output_buffer(torch.from_numpy(sym))
        expect(not sd.is_output_registered(torch.from_numpy(sym)), "deregistration")
        # Bad arguments raise, naming them.
        expect("my_pe" in raises(InvalidArgument, lambda: ccl.AllGatherIntoTensor(me + 1, n)), "my_pe named")
        expect("npes" in raises(InvalidArgument, lambda: ccl.AllGatherIntoTensor(me, n + 1)), "npes named")
        expect("sendbuff" in raises(InvalidArgument, lambda: ag("x", out, 1, ccl.DataType.Int8)), "sendbuff named")
        expect("sendcount" in raises(InvalidArgument, lambda: ag(x, out, -1, ccl.DataType.Int8)), "sendcount named")
        expect("input_buffer_size" in raises(InvalidArgument, lambda: ccl.AllGatherIntoTensor(me, n, 0, 8)),
               "sizes named")
        raises(InvalidArgument, lambda: ccl.AllGatherIntoTensor(me, n, 1, 2, 3))
        sh.barrier_all()
        print(f"PE {me}/{n}: ccl handles ok", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
