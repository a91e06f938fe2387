# SPDX-License-Identifier: MIT
"""A peer that lies about its combine input (issue 29, item 3). The last PE is the liar: in a
first round it combines honestly from the shared tensor arena (so every reader maps its arena
and sums its rows in place, exactly), then it rewrites one field of what it published (arena
size, handle, input offset, rows, row size, where the weights are and their offset), marks the
record as the next round's and signals the readers without combining. Each reader's combine
must then refuse with a RemoteError naming the liar and the field, before reading one byte
through it (before the fix, an overstated arena size made the reader read past its mapping).

    mori run -n 2 python ep_published_lies.py
"""

from __future__ import annotations

import ctypes
import os
import tempfile

import torch

import mori.shmem as sh
from mori import _C
from mori.core.errors import RemoteError
from mori.ops import EpDispatchCombineConfig, EpDispatchCombineKernelType as K, EpDispatchCombineOp

EPR, TOPK, MAX_TOK, HIDDEN = 2, 2, 24, 256
ROW = HIDDEN * 2  # bf16
U64 = ctypes.c_uint64


def fail(what: str) -> None:
    raise AssertionError(f"PE {sh.shmem_mype()}: {what}")


def make_op(me: int, world: int) -> EpDispatchCombineOp:
    return EpDispatchCombineOp(
        EpDispatchCombineConfig(
            data_type=torch.bfloat16,
            rank=me,
            world_size=world,
            hidden_dim=HIDDEN,
            scale_dim=0,
            scale_type_size=4,
            max_token_type_size=2,
            max_num_inp_token_per_rank=MAX_TOK,
            num_experts_per_rank=EPR,
            num_experts_per_token=TOPK,
            kernel_type=K.IntraNode,
        )
    )


def inputs(me: int, world: int, seed: int):
    """This PE's tokens: every token goes to the liar (the last PE) and to one other expert."""
    g = torch.Generator().manual_seed(seed * 131 + me)
    n = int(torch.randint(MAX_TOK // 2, MAX_TOK + 1, (1,), generator=g))
    x = torch.randn(n, HIDDEN, generator=g).to(torch.bfloat16)
    w = torch.rand(n, TOPK, generator=g)
    liar_expert = (world - 1) * EPR + torch.randint(0, EPR, (n,), generator=g)
    other = torch.randint(0, (world - 1) * EPR, (n,), generator=g)
    idx = torch.stack([liar_expert, other], dim=1).to(torch.int32)
    return x, w, idx


class Published:
    """The liar's own published record, read and written through its fields' offsets."""

    def __init__(self, op: EpDispatchCombineOp):
        self.lay = op._handle.published_layout()
        self.addr = self.lay["base"] + self.lay["pull_source"]
        self.size = self.lay["pull_source_bytes"]

    def __getitem__(self, field: str) -> int:
        return U64.from_address(self.addr + self.lay["fields"][field]).value

    def __setitem__(self, field: str, value) -> None:
        at = self.addr + self.lay["fields"][field]
        if field == "arena_handle":
            room = self.size - self.lay["fields"][field]
            raw = value.encode()[:room].ljust(room, b"\0")
            ctypes.memmove(at, raw, room)
        else:
            U64.from_address(at).value = value % (1 << 64)


def lies(size: int, off: int, rows: int, op_bytes: int, bogus_file: str, unsealed: str):
    """(field the error must name, what to change) for every published field, each lie on its
    own: from the liar's honest record (its arena's size, its input's offset and rows)."""
    k4 = TOPK * 4
    return [
        # the reported crash: the arena claimed twice its size, the rows just past its real end
        ("arena_size", {"arena_size": size * 2, "input_offset": size}),
        ("arena_size", {"arena_size": size * 2}),
        ("arena_size", {"arena_size": size - 4096}),
        ("arena_size", {"arena_size": 2**64 - 1, "input_offset": 2**63}),
        ("input_offset", {"input_offset": size - ROW}),
        ("input_offset", {"input_offset": 2**64 - ROW}),
        ("input_offset", {"input_offset": off + 1}),
        ("rows", {"rows": (size - off) // ROW + 1}),
        ("rows", {"rows": 2**61}),
        ("rows", {"rows": 0}),
        ("row_bytes", {"row_bytes": ROW * 2}),
        ("row_bytes", {"row_bytes": 0}),
        ("weights", {"weights": 7}),
        ("weights_offset", {"weights": 1, "weights_offset": size - k4 * rows + 4}),
        ("weights_offset", {"weights": 1, "weights_offset": 2**64 - 4}),
        ("weights_offset", {"weights": 1, "weights_offset": off + 2}),
        ("weights", {"weights": 2, "weights_offset": op_bytes - 4}),  # once "op buffers": no longer read in place
        ("arena_handle", {"arena_handle": ""}),
        ("arena_handle", {"arena_handle": bogus_file, "arena_size": 64 << 20}),
        ("arena_handle", {"arena_handle": unsealed, "arena_size": 64 << 20}),
        ("arena_handle", {"arena_handle": "/proc/%d/fd/%d" % (os.getpid(), 10**6)}),
        ("arena_handle", {"arena_handle": "x" * 200}),
    ]


def honest_round(op: EpDispatchCombineOp, me: int, world: int, seed: int) -> None:
    """The liar's input in the arena, summed in place by every reader; checked exactly."""
    liar = world - 1
    x, w, idx = inputs(me, world, seed)
    out = op.dispatch(x, w, None, idx)
    total = int(out[4][0])
    rows = (out[0][:total].float() * (1.5 + me)).to(torch.bfloat16)
    if me == liar:
        with sh.shared_tensors():
            inp = rows.clone()
        if not sh.is_shared_tensor(inp):
            fail("the liar's input is not in the arena")
    else:
        inp = rows
    got, _ = op.combine(inp, None, idx)
    if me != liar and op.last_combine_in_place_peers() != 1:
        fail(f"{op.last_combine_in_place_peers()} peers read in place in the honest round, expected 1")
    want = torch.zeros(x.shape[0], HIDDEN)
    for t, (a, b) in enumerate(idx.tolist()):
        for e in (a, b):
            want[t] += (x[t].float() * (1.5 + e // EPR)).to(torch.bfloat16).float()
    if not torch.equal(got[: x.shape[0]].view(torch.int16), want.to(torch.bfloat16).view(torch.int16)):
        fail("the honest round's sums differ")


def lying_round(op: EpDispatchCombineOp, me: int, world: int, seed: int, case: int, files: tuple) -> str:
    """The liar publishes lie number `case` as the next round's record, built from its honest
    record and this round's rows; every reader's combine must refuse it, naming PE and field."""
    liar = world - 1
    x, w, idx = inputs(me, world, seed)
    out = op.dispatch(x, w, None, idx)
    total = int(out[4][0])
    if me == liar:
        ps = Published(op)
        ps["rows"] = total  # this round's rows: the honest part of the record
        field, change = lies(ps["arena_size"], ps["input_offset"], total, ps.lay["bytes"], *files)[case]
        print(f"PE {me}: lie {case}: {change}", flush=True)
        for name, value in change.items():
            ps[name] = value
        ps["round"] = ps["round"] + 1
        sigs = ps.lay["base"] + ps.lay["combine_signals"] + 8 * liar
        for r in range(world - 1):
            U64.from_address(_C.shmem.ptr(sigs, r)).value = ps["round"]
        return "lied"
    field = lies(0, 0, 0, 0, "", "")[case][0]
    try:
        op.combine(out[0][:total].clone(), None, idx)
    except RemoteError as e:
        msg = str(e)
        if f"PE {liar}" not in msg or field not in msg:
            return f"FAILED: lie {case}: the error does not name PE {liar} and {field!r}: {msg}"
        return msg
    return f"FAILED: lie {case}: combine accepted it"


def main() -> None:
    sh.shmem_init()
    me, world = sh.shmem_mype(), sh.shmem_npes()
    liar = world - 1
    sh.set_shared_tensor_min_bytes(0)
    # A real 64 MiB file the liar names as its arena: readers must refuse anything but an arena.
    bogus = tempfile.TemporaryFile()
    bogus.truncate(64 << 20)
    bogus_file = "/proc/%d/fd/%d" % (os.getpid(), bogus.fileno())
    # And a memory file labelled as an arena whose size is not sealed (it could shrink under a
    # reader's mapping).
    fake = os.memfd_create("mori-tensors-fake")
    os.ftruncate(fake, 64 << 20)
    unsealed = "/proc/%d/fd/%d" % (os.getpid(), fake)
    seed = int.from_bytes(os.urandom(4), "little")  # each PE's own rows; the checks need no others'
    n_cases = len(lies(0, 0, 0, 0, "", ""))
    refused = []
    for i in range(n_cases):
        op = make_op(me, world)
        honest_round(op, me, world, seed + 2 * i)
        refused.append(lying_round(op, me, world, seed + 2 * i + 1, i, (bogus_file, unsealed)))
        if me != liar:
            print(f"PE {me}: lie {i}: {refused[-1]}", flush=True)
        sh.shmem_barrier_all()
        del op
    if me != liar:
        failed = [r for r in refused if r.startswith("FAILED")]
        if failed:
            fail("\n".join(failed))
        print(f"PE {me}: first refusal: {refused[0]}")
        print(f"PE {me}: refused {len(refused)} lies of PE {liar}")
    sh.shmem_barrier_all()
    if me == 0:
        print(f"ep published lies refused on {world} PEs")
    sh.shmem_finalize()


if __name__ == "__main__":
    main()
