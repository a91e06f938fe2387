# SPDX-License-Identifier: MIT
"""GPU symmetric heap checks, run on every PE of a job with one GPU per PE:

    mori run -n 2 python gpu_suite.py [check ...]      # default: every check
    MORI_DISABLE_P2P=1 mori run -n 2 python gpu_suite.py disable_p2p

Each PE binds GPU LOCAL_RANK through torch before shmem init (MORI's usual order). All PEs
seed the same generators, so each can rebuild what a peer sent and check its memory exactly.
Prints "PASS <check>" per check; exits non-zero on the first failure.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np
import torch

LOCAL_RANK = int(os.environ.get("LOCAL_RANK", "0"))
torch.cuda.set_device(LOCAL_RANK % torch.cuda.device_count())  # PEs may share GPUs (tests/harness.py)

import mori.shmem as sh  # noqa: E402
from mori import _C  # noqa: E402
from mori.core.errors import InvalidArgument, Unavailable  # noqa: E402
from mori.shmem import gpu, selftest  # noqa: E402
from mori.shmem.tensor_utils import (  # noqa: E402
    mori_shmem_create_tensor,
    mori_shmem_create_tensor_list_intra_node,
    mori_shmem_free_tensor,
    symm_mori_shmem_tensor,
)

_native = _C.shmem
U64 = np.uint64


def expect(cond: bool, what: str) -> None:
    if not cond:
        raise AssertionError(f"PE {sh.shmem_mype()}: {what}")


def sync() -> None:
    torch.cuda.synchronize()


def zeros(n: int, dtype: torch.dtype) -> torch.Tensor:
    """A zeroed symmetric tensor; the fill is finished on every PE before anyone writes into it."""
    t = mori_shmem_create_tensor((n,), dtype)
    t.zero_()
    sync()
    sh.shmem_barrier_all()
    return t


def payloads(seed: int, n_pes: int, nbytes: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, size=nbytes, dtype=np.uint8) for _ in range(n_pes)]


def pattern(round_: int, idx: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return (U64(round_) * U64(0x9E3779B97F4A7C15)) ^ (idx.astype(U64) * U64(0xBF58476D1CE4E5B9)) ^ U64(0x5555)


# ---------------------------------------------------------------- host-initiated RMA


def check_host_rma(me: int, n: int) -> None:
    right, left = (me + 1) % n, (me - 1) % n
    cap = (16 << 20) + 64
    x = zeros(cap, torch.uint8)
    seed = 100
    for nbytes in (1, 7, 4096, 65537, 1 << 20, (16 << 20) + 3):
        for src_kind in ("host", "device"):
            seed += 1
            data = payloads(seed, n, nbytes)
            off = int(np.random.default_rng(seed).integers(0, 61))
            x.fill_(0xAB)
            sync()
            sh.shmem_barrier_all()
            src = data[me] if src_kind == "host" else torch.from_numpy(data[me]).cuda()
            sh.put(x[off : off + nbytes], src, pe=right)
            sh.shmem_barrier_all()
            got = x.cpu().numpy()
            expect(np.array_equal(got[off : off + nbytes], data[left]), f"host put {src_kind} {nbytes}B @+{off}")
            expect(
                bool((got[:off] == 0xAB).all() and (got[off + nbytes :] == 0xAB).all()),
                "host put wrote outside its range",
            )
            back = (
                np.empty(nbytes, np.uint8)
                if src_kind == "host"
                else torch.empty(nbytes, dtype=torch.uint8, device="cuda")
            )
            sh.get(back, x[off : off + nbytes], pe=right)
            back = back if isinstance(back, np.ndarray) else back.cpu().numpy()
            expect(np.array_equal(back, data[me]), f"host get {src_kind} {nbytes}B from PE {right}")
            sh.shmem_barrier_all()
    # nbi puts complete at quiet.
    data = payloads(7, n, 1 << 20)
    chunks = torch.from_numpy(data[me]).cuda()
    for c in range(0, 1 << 20, 1 << 16):
        _native.put(x.data_ptr() + c, chunks.data_ptr() + c, 1 << 16, right, True)
    sh.quiet()
    sh.shmem_barrier_all()
    expect(np.array_equal(x[: 1 << 20].cpu().numpy(), data[left]), "put nbi + quiet")
    # put_signal: data then a signal in GPU memory; host atomics on GPU words.
    sig = zeros(4, torch.int64)
    sh.shmem_barrier_all()
    _native.put_signal(x.data_ptr(), chunks.data_ptr(), 4096, sig.data_ptr(), 1000 + me, 0, right, False)
    _native.put_signal(x.data_ptr(), chunks.data_ptr(), 0, sig.data_ptr() + 8, 5, 1, right, False)
    sh.shmem_barrier_all()
    expect(int(sig[0]) == 1000 + left and int(sig[1]) == 5, f"host put_signal: sig {sig[:2].tolist()}")
    rounds = 200
    mine = [int(_native.atomic(sig.data_ptr() + 16, 5, 8, 1, 0, 0)) for _ in range(rounds)]  # fetch_add on PE 0
    for _ in range(rounds):
        _native.atomic(sig.data_ptr() + 24, 4, 4, 3, 0, n - 1)  # 32-bit add on the last PE
    old = int(_native.atomic(sig.data_ptr() + 28, 3, 4, 77, 0, right))  # compare-swap 0 -> 77 on the upper word
    sh.shmem_barrier_all()
    seen = np.zeros(rounds * n, np.int64)
    mine_arr = torch.tensor(mine, dtype=torch.int64, device="cuda")
    tickets = zeros(rounds * n, torch.int64)
    tickets[me * rounds : (me + 1) * rounds].copy_(mine_arr)
    sync()
    sh.shmem_barrier_all()
    for pe in range(n):
        part = np.empty(rounds, np.int64)
        sh.get(part, tickets[pe * rounds : (pe + 1) * rounds], pe=pe)
        seen[pe * rounds : (pe + 1) * rounds] = part
    expect(np.array_equal(np.sort(seen), np.arange(rounds * n)), "host fetch_add tickets are not a permutation")
    if me == 0:
        expect(int(sig[2]) == rounds * n, f"host fetch_add total {int(sig[2])}")
    if me == n - 1:
        expect((int(sig[3]) & 0xFFFFFFFF) == 3 * rounds * n, f"host 32-bit add total {int(sig[3]) & 0xFFFFFFFF}")
    expect(old == 0 and ((int(sig[3]) >> 32) & 0xFFFFFFFF) == 77, "host compare_swap")
    mori_shmem_free_tensor(tickets)
    mori_shmem_free_tensor(sig)
    mori_shmem_free_tensor(x)


def check_stream_rma(me: int, n: int) -> None:
    right, left = (me + 1) % n, (me - 1) % n
    nbytes = (4 << 20) + 5
    x = zeros(nbytes, torch.uint8)
    y = zeros(nbytes, torch.uint8)
    sig = zeros(2, torch.int64)
    for round_, engine in enumerate(("copy", "sm", "copy", "sm")):
        data = payloads(200 + round_, n, nbytes)
        src = torch.from_numpy(data[me]).cuda()
        gpu.putmem_on_stream(x, src, nbytes, right, engine=engine)
        gpu.putmem_signal_on_stream(y, src, nbytes, sig, round_ + 1, gpu.SIGNAL_SET, right)
        gpu.signal_wait_until_on_stream(sig, gpu.CMP_GE, round_ + 1)
        got_y = y.clone()  # ordered after the wait on the same stream
        gpu.shmem_barrier_on_stream()
        got_x = x.clone()
        back = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
        gpu.getmem_on_stream(back, x, nbytes, right)
        sync()
        expect(np.array_equal(got_x.cpu().numpy(), data[left]), f"putmem_on_stream engine={engine}")
        expect(np.array_equal(got_y.cpu().numpy(), data[left]), "putmem_signal_on_stream + wait")
        expect(np.array_equal(back.cpu().numpy(), data[me]), "getmem_on_stream")
        sh.shmem_barrier_all()
    # Bad input is refused with errors that name the problem.
    plain = torch.empty(16, dtype=torch.uint8, device="cuda")
    for bad, what in (
        (lambda: gpu.putmem_on_stream(plain, plain, 16, right), "non-symmetric dst"),
        (
            lambda: gpu.putmem_on_stream(gpu.heap_base() + gpu.heap_size() - 8, plain, 16, right),
            "past the end of the heap",
        ),
        (lambda: gpu.putmem_on_stream(x, plain, 16, n), "pe out of range"),
        (lambda: gpu.putmem_on_stream(x, plain, 16, right, engine="dma"), "engine"),
    ):
        try:
            bad()
        except InvalidArgument:
            continue
        raise AssertionError(f"PE {me}: {what} was accepted")
    try:
        sh.shmem_malloc(gpu.heap_size() * 2)
        raise AssertionError("an allocation larger than the GPU heap succeeded")
    except MemoryError as exc:
        expect("MORI_SHMEM_GPU_HEAP_SIZE" in str(exc), f"OOM message: {exc}")
    for t in (sig, y, x):
        mori_shmem_free_tensor(t)


# ---------------------------------------------------------------- device-initiated RMA


def check_device_put_get(me: int, n: int) -> None:
    right, left = (me + 1) % n, (me - 1) % n
    cap = (1 << 20) + 64
    x = zeros(cap, torch.uint8)
    seed = 300
    for scope_name, scope in selftest.SCOPES.items():
        for nbytes, blocks in ((1, 1), (13, 1), (4096 + 5, 1), (65536, 3), (1 << 20, 8)):
            if scope == selftest.THREAD and nbytes > 65536:
                blocks = 64  # one thread per block: spread the bytes
            seed += 1
            data = payloads(seed, n, nbytes)
            off = int(np.random.default_rng(seed).integers(0, 33))
            x.fill_(0xCD)
            sync()
            sh.shmem_barrier_all()
            src = torch.from_numpy(data[me]).cuda()
            selftest.put(scope, x.data_ptr() + off, src.data_ptr(), nbytes, right, blocks=blocks)
            gpu.shmem_barrier_on_stream()
            sync()
            got = x.cpu().numpy()
            expect(np.array_equal(got[off : off + nbytes], data[left]), f"device put {scope_name} {nbytes}B @+{off}")
            expect(
                bool((got[:off] == 0xCD).all() and (got[off + nbytes :] == 0xCD).all()),
                f"device put {scope_name} wrote outside its range",
            )
            out = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
            selftest.get(scope, out.data_ptr(), x.data_ptr() + off, nbytes, right, blocks=blocks)
            sync()
            expect(np.array_equal(out.cpu().numpy(), data[me]), f"device get {scope_name} {nbytes}B")
            sh.shmem_barrier_all()
    # p / g of int64 words.
    count = 1000
    rng = np.random.default_rng(77)
    vals = [rng.integers(-(2**62), 2**62, size=count) for _ in range(n)]
    words = zeros(count, torch.int64)
    mine = torch.from_numpy(vals[me]).cuda()
    selftest.p(words.data_ptr(), mine.data_ptr(), count, right)
    gpu.shmem_barrier_on_stream()
    sync()
    expect(np.array_equal(words.cpu().numpy(), vals[left]), "device p")
    out = torch.empty(count, dtype=torch.int64, device="cuda")
    selftest.g(out.data_ptr(), words.data_ptr(), count, right)
    sync()
    expect(np.array_equal(out.cpu().numpy(), vals[me]), "device g")
    sh.shmem_barrier_all()
    mori_shmem_free_tensor(words)
    mori_shmem_free_tensor(x)


def check_atomics(me: int, n: int) -> None:
    sms = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    blocks, threads, iters = sms * 4, 256, 8
    total = blocks * threads  # threads per GPU
    counters = zeros(8, torch.int64)  # [0] add64, [1] add32 (low word), [2] tickets, [3] cas
    out = torch.full((total * iters,), -1, dtype=torch.int64, device="cuda")
    base = counters.data_ptr()
    start = time.time()
    selftest.atomics(base, base + 8, base + 16, base + 24, out.data_ptr(), iters, blocks, threads)
    sync()
    elapsed = time.time() - start
    sh.shmem_barrier_all()
    c = counters.cpu().numpy()
    if me == 0:
        expect(int(c[0]) == n * total * iters, f"atomic_add u64 total {int(c[0])} != {n * total * iters}")
        cas_total = n * blocks * min(iters, 2)
        expect(int(c[3]) == cas_total, f"compare-swap increments {int(c[3])} != {cas_total}")
    if me == n - 1:
        expect((int(c[1]) & 0xFFFFFFFF) == (n * total * iters) & 0xFFFFFFFF, f"atomic_inc u32 total {int(c[1])}")
    # Tickets: every (thread, iteration) of every GPU drew one from PE (thread + iteration) % n;
    # per target PE, the tickets drawn must be exactly 0 .. count-1.
    tickets = zeros(n * total * iters, torch.int64)
    tickets[me * total * iters : (me + 1) * total * iters].copy_(out)
    sync()
    sh.shmem_barrier_all()
    tid = np.repeat(np.arange(total), iters)
    it = np.tile(np.arange(iters), total)
    target = (tid + it) % n
    drawn = {pe: [] for pe in range(n)}
    for src_pe in range(n):
        part = np.empty(total * iters, np.int64)
        sh.get(part, tickets[src_pe * total * iters : (src_pe + 1) * total * iters], pe=src_pe)
        for pe in range(n):
            drawn[pe].append(part[target == pe])
    for pe in range(n):
        got = np.sort(np.concatenate(drawn[pe]))
        expect(np.array_equal(got, np.arange(len(got))), f"fetch_add tickets on PE {pe} are not 0..{len(got) - 1}")
    expect(int(c[2]) == len(np.concatenate(drawn[me])), f"ticket counter {int(c[2])}")
    print(
        f"PE {me}: {blocks}x{threads} threads x {iters} iterations of contended atomics in {elapsed:.2f} s", flush=True
    )
    mori_shmem_free_tensor(tickets)
    mori_shmem_free_tensor(counters)


def check_signal_ordering(me: int, n: int) -> None:
    peer = me ^ 1
    if peer >= n:
        return
    role = me & 1  # even PEs produce, odd PEs consume
    for scope_name, words, rounds in (("block", 1024, 3000), ("warp", 128, 2000), ("thread", 16, 2000)):
        buf = zeros(words, torch.int64)
        flags = zeros(2, torch.int64)  # [0] signal, [1] ack
        staging = torch.empty(words, dtype=torch.int64, device="cuda")
        errors = torch.zeros(1, dtype=torch.int64, device="cuda")
        fp = flags.data_ptr()
        selftest.signal_rounds(
            role,
            selftest.SCOPES[scope_name],
            buf.data_ptr(),
            staging.data_ptr(),
            words,
            fp,
            fp + 8,
            rounds,
            peer,
            errors.data_ptr(),
        )
        sync()
        f = flags.cpu().numpy()
        if role == 1:
            expect(int(errors[0]) == 0, f"signal {scope_name}: {int(errors[0])} payload words stale after the signal")
            expect(int(f[0]) == rounds, f"signal {scope_name}: final signal {int(f[0])} != {rounds}")
            last = buf.cpu().numpy().view(U64)
            expect(np.array_equal(last, pattern(rounds, np.arange(words))), f"signal {scope_name}: final payload")
        else:
            expect(int(f[1]) == rounds, f"signal {scope_name}: final ack {int(f[1])} != {rounds}")
        sh.shmem_barrier_all()
        for t in (flags, buf):
            mori_shmem_free_tensor(t)
    expect(selftest.pattern(5, 9) == int(pattern(5, np.array([9]))[0]), "host/device pattern mismatch")


def check_barrier_on_stream(me: int, n: int) -> None:
    """Double-buffered rounds enqueued without host syncs: a round's local read must see the peer's
    put even though one PE sleeps before putting, so only the stream barrier orders them."""
    right, left = (me + 1) % n, (me - 1) % n
    words, rounds = 1 << 16, 12
    bufs = [zeros(words, torch.int64) for _ in range(2)]
    outs = torch.empty((rounds, words), dtype=torch.int64, device="cuda")
    srcs = torch.from_numpy(
        np.stack([pattern(r * 16 + me, np.arange(words)).view(np.int64) for r in range(rounds)])
    ).cuda()
    sync()
    sh.shmem_barrier_all()
    for r in range(rounds):
        if me == r % n:
            torch.cuda._sleep(20_000_000)  # ~10 ms of GPU time before this PE's put
        gpu.putmem_on_stream(bufs[r % 2], srcs[r], words * 8, right, engine="sm" if r % 3 else "copy")
        gpu.shmem_barrier_on_stream()
        outs[r].copy_(bufs[r % 2])
    sync()
    got = outs.cpu().numpy().view(U64)
    for r in range(rounds):
        expect(np.array_equal(got[r], pattern(r * 16 + left, np.arange(words))), f"barrier_on_stream round {r}")
    # The device-initiated block barrier (barrier_all_block inside one kernel).
    out = torch.empty(words, dtype=torch.int64, device="cuda")
    for r in range(3):
        selftest.barrier_block(bufs[0].data_ptr(), out.data_ptr(), 4096, right, 1000 + r)
        sync()
        expect(
            np.array_equal(out[:4096].cpu().numpy().view(U64), pattern(1000 + r + left, np.arange(4096))),
            f"barrier_all_block round {r}",
        )
        sh.shmem_barrier_all()
    for t in bufs:
        mori_shmem_free_tensor(t)


def check_graph(me: int, n: int) -> None:
    """Capture device puts, a copy-engine put and the stream barrier in a CUDA graph; replay it."""
    right, left = (me + 1) % n, (me - 1) % n
    nbytes = (1 << 20) + 24
    dst = zeros(nbytes, torch.uint8)
    dst2 = zeros(nbytes, torch.uint8)
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    out = torch.empty_like(src)
    out2 = torch.empty_like(src)
    sync()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        selftest.put(selftest.BLOCK, dst.data_ptr(), src.data_ptr(), nbytes, right, blocks=16)
        gpu.putmem_on_stream(dst2, src, nbytes, right, engine="copy")
        gpu.shmem_barrier_on_stream()
        out.copy_(dst)
        out2.copy_(dst2)
    sh.shmem_barrier_all()
    for replay in range(6):
        data = payloads(500 + replay, n, nbytes)
        src.copy_(torch.from_numpy(data[me]))
        graph.replay()
        sync()
        expect(np.array_equal(out.cpu().numpy(), data[left]), f"graph replay {replay}: device put")
        expect(np.array_equal(out2.cpu().numpy(), data[left]), f"graph replay {replay}: copy-engine put")
        sh.shmem_barrier_all()
    del graph
    mori_shmem_free_tensor(dst2)
    mori_shmem_free_tensor(dst)


def check_ptr_p2p(me: int, n: int) -> None:
    right, left = (me + 1) % n, (me - 1) % n
    t = mori_shmem_create_tensor((64, 33), torch.float32)
    addr = t.data_ptr()
    expect(gpu.contains(addr), "mori_shmem_create_tensor is not on the GPU heap")
    bases = gpu.peer_bases()
    expect(sh.shmem_ptr_p2p(addr, me, me) == addr, "shmem_ptr_p2p to myself")
    peer_addr = sh.shmem_ptr_p2p(addr, me, right)
    expect(
        peer_addr != 0 and peer_addr == bases[right] + (addr - gpu.heap_base()),
        f"shmem_ptr_p2p to PE {right}: {peer_addr:#x}",
    )
    expect(gpu.transport_name(right) == "cuda", f"device transport {gpu.transport_name(right)}")
    sync()
    sh.shmem_barrier_all()
    view = symm_mori_shmem_tensor(t, right)
    expect(view.shape == t.shape and view.dtype == t.dtype and view.device == t.device, "peer view metadata")
    view.copy_(torch.arange(64 * 33, dtype=torch.float32, device="cuda").view(64, 33) + 1000 * me)
    sync()
    sh.shmem_barrier_all()
    expect(
        torch.equal(t.cpu(), torch.arange(64 * 33, dtype=torch.float32).view(64, 33) + 1000 * left),
        "write through symm_mori_shmem_tensor",
    )
    views = mori_shmem_create_tensor_list_intra_node((16,), torch.int32, n)
    expect(
        len(views) == n
        and getattr(views[me], "__symm_tensor__", False)
        and views[right].data_ptr() == sh.shmem_ptr_p2p(views[me].data_ptr(), me, right),
        "tensor list",
    )
    views[right].fill_(me + 1)
    sync()
    sh.shmem_barrier_all()
    expect(bool((views[me] == left + 1).all()), "tensor list peer write")
    try:
        symm_mori_shmem_tensor(torch.zeros(4, device="cuda"), right)
        raise AssertionError("a non-symmetric tensor got a peer view")
    except InvalidArgument:
        pass
    mori_shmem_free_tensor(views[me])
    mori_shmem_free_tensor(t)


def check_disable_p2p(me: int, n: int) -> None:
    """Run with MORI_DISABLE_P2P=1: GPU peers are not P2P-reachable, so shmem_ptr_p2p gives 0."""
    right = (me + 1) % n
    t = mori_shmem_create_tensor((1024,), torch.float32)
    expect(sh.shmem_ptr_p2p(t.data_ptr(), me, right) == 0, "shmem_ptr_p2p to a non-P2P peer is not 0")
    expect(sh.shmem_ptr_p2p(t.data_ptr(), me, me) == t.data_ptr(), "shmem_ptr_p2p to myself")
    expect(gpu.transport_name(right) == "none" and not gpu.reachable(right), "device transport should be none")
    for what, call in (
        ("putmem_on_stream", lambda: gpu.putmem_on_stream(t, t, 16, right)),
        ("shmem_barrier_on_stream", lambda: gpu.shmem_barrier_on_stream()),
        ("symm_mori_shmem_tensor", lambda: symm_mori_shmem_tensor(t, right)),
    ):
        try:
            call()
            raise AssertionError(f"{what} to a non-P2P peer did not fail")
        except Unavailable:
            pass
    sh.shmem_barrier_all()
    mori_shmem_free_tensor(t)


CHECKS = {
    "host_rma": check_host_rma,
    "stream_rma": check_stream_rma,
    "device_put_get": check_device_put_get,
    "atomics": check_atomics,
    "signal_ordering": check_signal_ordering,
    "barrier_on_stream": check_barrier_on_stream,
    "graph": check_graph,
    "ptr_p2p": check_ptr_p2p,
}


def main(argv: list[str]) -> int:
    names = argv or list(CHECKS)
    try:
        sh.shmem_init()
    except Unavailable as exc:
        if names == ["disable_p2p"]:
            # The host heap needs a transport between the PEs that is not shared memory (tcp).
            print(f"SKIP disable_p2p: {exc}", flush=True)
            return 0
        raise
    me, n = sh.shmem_mype(), sh.shmem_npes()
    expect(gpu.is_bound() and gpu.device() == torch.cuda.current_device(), "not bound to its GPU")
    for name in names:
        start = time.time()
        (check_disable_p2p if name == "disable_p2p" else CHECKS[name])(me, n)
        sync()
        sh.shmem_barrier_all()
        if me == 0:
            print(f"PASS {name} ({time.time() - start:.2f} s)", flush=True)
    sh.shmem_finalize()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
