# SPDX-License-Identifier: MIT
"""DeepSpeed's own MORI path (deepspeed/comm/mori.py, DS_SDMA_ALLGATHER=1) against this MORI, on
CPU. DeepSpeed builds its handle at backend init (shmem over the "default" process group,
``mori.ccl.AllGatherIntoTensor(my_pe=, npes=, input_buffer_size=, output_buffer_size=,
copy_output_to_user=True)``); every all-gather then calls ``handle(in_ptr, out_ptr, numel,
DataType, stream)``. Its CPU accelerator has no streams, so there DeepSpeed's own wrapper falls
back to gloo: this program drives the handle DeepSpeed built with the arguments it passes, checks
the outputs bit-exactly, and checks deepspeed.comm's all-gather still gives the same bytes.
Launch: mori run -n N python ds_builtin_mori.py
"""

from __future__ import annotations

import os
import sys

import torch

os.environ.setdefault("DS_ACCELERATOR", "cpu")
os.environ["DS_SDMA_ALLGATHER"] = "1"
os.environ["DS_SDMA_ALLGATHER_MAX_NUMEL"] = str(1 << 16)
import deepspeed  # noqa: E402
import deepspeed.comm as dscomm  # noqa: E402
import deepspeed.comm.mori  # noqa: E402,F401
import deepspeed.comm.torch  # noqa: E402,F401

sys.modules["deepspeed.comm.torch"].build_shm_op = lambda: None  # a JIT build the all-gathers never use
ds_mori = sys.modules["deepspeed.comm.mori"]


def main() -> int:
    deepspeed.init_distributed(dist_backend="gloo")
    me, n = dscomm.get_rank(), dscomm.get_world_size()
    if not ds_mori.is_enabled():
        raise AssertionError(f"rank {me}: DeepSpeed did not build its MORI handle")
    import mori.ccl as ccl
    import mori.shmem as sh

    handle = ds_mori._handle
    assert isinstance(handle, ccl.AllGatherIntoTensor) and sh.shmem_mype() == me and sh.shmem_npes() == n
    for dtype in (
        torch.bfloat16,
        torch.float16,
        torch.float32,
        torch.float64,
        torch.int8,
        torch.uint8,
        torch.int16,
        torch.int32,
        torch.int64,
    ):
        numel = 4098 if dtype.itemsize >= 2 else 4100  # whole uint32 lanes per rank (MORI's rule)

        def gen(r: int) -> torch.Tensor:
            return torch.randint(-100, 100, (numel,), generator=torch.Generator().manual_seed(31 * r + 7))

        x = gen(me).to(dtype)
        want = torch.cat([gen(r).to(dtype) for r in range(n)])
        assert ds_mori.supports(x), f"DeepSpeed's supports() refused {dtype}"
        out = torch.zeros(n * numel, dtype=dtype)
        ok = handle(x.data_ptr(), out.data_ptr(), x.numel(), ds_mori._dtype_map[dtype], 0)
        assert ok is True and torch.equal(out, want), f"rank {me}: handle all-gather of {dtype}"
        if dtype in (torch.float32, torch.int64):  # types gloo gathers
            out.zero_()
            dscomm.all_gather_into_tensor(out, x)  # DeepSpeed's wrapper (falls back to gloo on CPU)
            assert torch.equal(out, want), f"rank {me}: deepspeed.comm all-gather of {dtype}"
    # A shard that is not whole uint32 lanes: MORI's handle raises; DeepSpeed's wrapper falls back.
    odd = torch.arange(4099, dtype=torch.int8)
    try:
        handle(
            odd.data_ptr(), torch.zeros(n * 4099, dtype=torch.int8).data_ptr(), 4099, ds_mori._dtype_map[torch.int8], 0
        )
        raise AssertionError(f"rank {me}: a 4099-byte shard was accepted")
    except RuntimeError as exc:
        assert "multiple of 4" in str(exc), exc
    assert ds_mori.allgather_into_tensor(odd, torch.zeros(n * 4099, dtype=torch.int8)) is None
    too_big = torch.zeros(ds_mori._max_numel + 1)
    assert not ds_mori.supports(too_big), "supports() accepted a shard past DS_SDMA_ALLGATHER_MAX_NUMEL"
    assert (
        handle(
            too_big.data_ptr(), torch.zeros(n * too_big.numel()).data_ptr(), too_big.numel(), ccl.DataType.Float32, 0
        )
        is False
    ), "the handle accepted a shard past its input buffer"
    dscomm.barrier()
    print(f"rank {me}/{n}: deepspeed builtin mori ok", flush=True)
    # PyTorch asks every program to destroy its process groups before exit: a gloo group left to
    # the interpreter's teardown can abort the process in a worker thread ("terminate called
    # without an active exception", pytorch/pytorch#190489), after this program's work is done.
    torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
