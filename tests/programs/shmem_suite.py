# SPDX-License-Identifier: MIT
"""The shmem correctness matrix, run on every PE of a job however it was launched.

    mori run -n 4 python shmem_suite.py          # or mpirun -n 4 ..., or torch (see test_shmem_torch.py)

Every PE seeds the same generator, so each can rebuild what any peer sent and check
its own memory exactly. Each PE prints one JSON line per case (cases.py) and exits
non-zero, naming the case and the failing check, on any mismatch.
"""

from __future__ import annotations

import sys

import numpy as np

import mori.shmem as sh
from cases import run_cases
from mori import _C

DTYPES = [np.int8, np.uint16, np.int32, np.int64, np.uint64, np.float32, np.float64, np.complex128]


def expect(cond: bool, what: str) -> None:
    if not cond:
        raise AssertionError(f"PE {sh.my_pe()}: {what}")


def check_rma(me: int, n: int) -> None:
    rng = np.random.default_rng(1234)
    right, left = (me + 1) % n, (me - 1) % n
    for dtype in DTYPES:
        for count in (1, 3, 17, 1000, 65537, 1 << 20):
            # Every PE draws every PE's payload in the same order, so all agree on all.
            payloads = [(rng.standard_normal(count) * 1000).astype(dtype) for _ in range(n)]
            offset = int(rng.integers(0, 7))  # unaligned start inside the buffer
            buf = sh.zeros(count + 8, dtype)
            sh.put(buf[offset : offset + count], payloads[me], pe=right)
            sh.barrier_all()
            expect(
                np.array_equal(buf[offset : offset + count], payloads[left]),
                f"put {dtype.__name__} x{count} @+{offset} from PE {left}",
            )
            expect(not buf[:offset].any() and not buf[offset + count :].any(), "put wrote outside its range")
            got = np.empty(count, dtype)
            sh.get(got, buf[offset : offset + count], pe=right)
            expect(np.array_equal(got, payloads[me]), f"get {dtype.__name__} x{count} from PE {right}")
            sh.free(buf)
    # Non-blocking puts complete at quiet; strided put/get; p/g.
    data = rng.integers(-(2**40), 2**40, size=(n, 4096))
    buf = sh.zeros(4096, np.int64)
    for chunk in range(0, 4096, 512):
        sh.put(buf[chunk : chunk + 512], data[me, chunk : chunk + 512], pe=right, nbi=True)
    sh.quiet()
    sh.barrier_all()
    expect(np.array_equal(buf, data[left]), "put_nbi + quiet")
    strided = sh.zeros(64, np.int64)
    src = np.arange(32, dtype=np.int64) + 1000 * me
    sh.iput(strided, src, dst_stride=2, src_stride=1, nelems=32, pe=right)
    sh.barrier_all()
    expect(np.array_equal(strided[::2], np.arange(32) + 1000 * left) and not strided[1::2].any(), "iput stride 2")
    back = np.zeros(16, np.int64)
    sh.iget(back, strided, dst_stride=1, src_stride=4, nelems=16, pe=me)
    expect(np.array_equal(back, (np.arange(32) + 1000 * left)[::2]), "iget stride 4")
    cell = sh.zeros(n, np.float64)
    sh.p(cell, float(me) + 0.5, pe=right, index=me)
    sh.barrier_all()
    expect(cell[left] == left + 0.5, "p")
    expect(sh.g(cell, pe=right, index=me) == me + 0.5, "g")
    sh.free(cell)
    sh.free(strided)
    sh.free(buf)


def check_atomics(me: int, n: int, rounds: int) -> None:
    for dtype in (np.int32, np.int64, np.uint32, np.uint64):
        counter = sh.zeros(4, dtype)
        sh.barrier_all()
        fetched = []
        for _ in range(rounds):
            sh.atomic_add(counter, 1, pe=0, index=0)
            sh.atomic_inc(counter, pe=0, index=1)
            fetched.append(int(sh.atomic_fetch_add(counter, 3, pe=0, index=2)))
        sh.barrier_all()
        if me == 0:
            expect(int(counter[0]) == rounds * n, f"atomic_add total {counter[0]} != {rounds * n} ({dtype.__name__})")
            expect(int(counter[1]) == rounds * n, f"atomic_inc total ({dtype.__name__})")
            expect(int(counter[2]) == 3 * rounds * n, f"fetch_add total ({dtype.__name__})")
        expect(len(set(fetched)) == rounds and all(v % 3 == 0 for v in fetched), "fetch_add values not unique")
        # fetch_inc hands out unique tickets across all PEs
        tickets = [int(sh.atomic_fetch_inc(counter, pe=n - 1, index=3)) for _ in range(rounds)]
        all_tickets = sh.zeros((n, rounds), np.int64)
        for pe in range(n):
            sh.put(all_tickets[me], np.asarray(tickets, np.int64), pe=pe)
        sh.barrier_all()
        expect(sorted(all_tickets.ravel().tolist()) == list(range(rounds * n)), "fetch_inc tickets not a permutation")
        sh.free(all_tickets)
        # bitwise: each PE owns bit `me`
        bits = sh.zeros(1, dtype)
        sh.atomic_or(bits, 1 << me, pe=0)
        sh.barrier_all()
        if me == 0:
            expect(int(bits[0]) == (1 << n) - 1, f"atomic_or {bits[0]}")
        sh.barrier_all()
        old = int(sh.atomic_fetch_xor(bits, 1 << me, pe=0))
        expect(old & (1 << me), "fetch_xor saw own bit cleared early")
        sh.barrier_all()
        if me == 0:
            expect(int(bits[0]) == 0, "atomic_xor")
            sh.atomic_set(bits, 0xF0, pe=0)
            sh.atomic_and(bits, 0x3C, pe=0)
            expect(int(sh.atomic_fetch(bits, pe=0)) == 0x30, "and/set/fetch")
            expect(int(sh.atomic_fetch_and(bits, 0x10, pe=0)) == 0x30 and int(bits[0]) == 0x10, "fetch_and")
            expect(int(sh.atomic_fetch_or(bits, 0x1, pe=0)) == 0x10 and int(bits[0]) == 0x11, "fetch_or")
        sh.barrier_all()
        # compare-swap: exactly one PE wins each round
        lock = sh.zeros(1, dtype)
        wins = 0
        for r in range(20):
            if int(sh.atomic_compare_swap(lock, r, r + 1, pe=0)) == r:
                wins += 1
            while int(sh.atomic_fetch(lock, pe=0)) == r:
                pass
        total = sh.zeros(1, np.int64)
        sh.atomic_add(total, wins, pe=0)
        sh.barrier_all()
        if me == 0:
            expect(int(total[0]) == 20, f"compare_swap winners {total[0]} != 20")
        if me == 0:
            old = sh.atomic_swap(lock, 7, pe=0)
            expect(int(old) == 20 and int(lock[0]) == 7, "swap")
        for a in (total, lock, bits, counter):
            sh.free(a)
    # float swap/fetch/set
    f = sh.zeros(1, np.float64)
    sh.atomic_set(f, 2.5, pe=me)
    expect(sh.atomic_swap(f, -1.25, pe=me) == 2.5 and sh.atomic_fetch(f, pe=me) == -1.25, "float swap")
    sh.free(f)


def check_signal(me: int, n: int, rounds: int) -> None:
    """Data must be visible once the signal is: the receiver checks every round's payload."""
    right, left = (me + 1) % n, (me - 1) % n
    count = 4096
    buf = sh.zeros(count, np.int64)
    ack = sh.zeros(1, np.uint64)
    sig = sh.zeros(1, np.uint64)
    for r in range(1, rounds + 1):
        payload = np.full(count, r * 1000 + me, np.int64)
        payload[::7] = -r
        sh.put_signal(buf, payload, sig, r, sh.SIGNAL_SET, pe=right)
        seen = sh.wait_until(sig, sh.CMP_GE, r)
        expect(int(seen) == r, f"signal {seen} != {r}")
        expect(
            buf[1] == r * 1000 + left and buf[0] == -r and buf[-1] == (r * 1000 + left if (count - 1) % 7 else -r),
            f"payload of round {r} not visible after its signal",
        )
        # Tell the left neighbour its buffer on us may be overwritten.
        sh.atomic_add(ack, 1, pe=left)
        sh.wait_until(ack, ">=", r)
    counter = sh.zeros(1, np.uint64)
    sh.put_signal(buf[:1], np.asarray([me], np.int64), counter, 1, sh.SIGNAL_ADD, pe=0)
    if me == 0:
        expect(int(sh.wait_until(counter, sh.CMP_EQ, n)) == n, "SIGNAL_ADD total")
        expect(sh.signal_fetch(counter) == n, "signal_fetch")
        expect(sh.test(counter, sh.CMP_EQ, n) and not sh.test(counter, sh.CMP_GT, n), "test")
    sh.barrier_all()
    for a in (counter, sig, ack, buf):
        sh.free(a)


def check_heap(me: int, n: int) -> None:
    base_free = sh.heap_free()
    rng = np.random.default_rng(99)
    live = []
    for step in range(300):
        if live and rng.random() < 0.45:
            sh.free(live.pop(int(rng.integers(len(live)))))
        else:
            a = sh.empty(int(rng.integers(1, 200_000)), np.uint8)
            a[:] = me
            live.append(a)
    for a in live:
        expect(not (a != me).any(), "an allocation was overwritten by another")
    # symmetric: the same allocation sequence gives the same offsets on all PEs
    offs = sh.zeros(n, np.int64)
    sh.p(offs, live[-1].__array_interface__["data"][0] - _C.shmem.heap_base(), pe=0, index=me)
    sh.barrier_all()
    if me == 0:
        expect(len(set(offs.tolist())) == 1, f"heap offsets differ between PEs: {offs}")
    sh.free(offs)
    for a in live:
        sh.free(a)
    expect(sh.heap_free() == base_free, "heap leaked after frees")
    # realloc keeps contents
    addr = _C.shmem.malloc(1000, 64, True)
    arr = np.frombuffer((np.ctypeslib.ctypes.c_char * 1000).from_address(addr), np.uint8)
    arr[:] = 7
    addr2 = _C.shmem.realloc(addr, 50_000_00)
    arr2 = np.frombuffer((np.ctypeslib.ctypes.c_char * 1000).from_address(addr2), np.uint8)
    expect((arr2 == 7).all(), "realloc lost data")
    _C.shmem.free(addr2)
    # exhaustion is an error that names the free space, and the heap stays usable
    try:
        sh.empty(sh.heap_size() * 2, np.uint8)
        expect(False, "exhausting the heap did not raise")
    except MemoryError as exc:
        expect("free" in str(exc) and "MORI_SHMEM_HEAP_SIZE" in str(exc), f"unhelpful OOM message: {exc}")
    after = sh.zeros(10, np.int32)
    sh.free(after)


def check_errors(me: int, n: int) -> None:
    buf = sh.zeros(4, np.int64)
    for bad in (-1, n, n + 5):
        try:
            sh.put(buf, np.zeros(4, np.int64), pe=bad)
            expect(False, f"put to PE {bad} did not raise")
        except ValueError as exc:
            expect(str(bad) in str(exc) and "out of range" in str(exc), f"bad-PE message: {exc}")
    try:
        sh.put(np.zeros(4, np.int64), np.zeros(4, np.int64), pe=0)
        expect(False, "put to a non-symmetric address did not raise")
    except ValueError as exc:
        expect("not symmetric" in str(exc), f"non-symmetric message: {exc}")
    try:
        sh.put(buf, np.zeros(8, np.int64), pe=0)
        expect(False, "oversized put did not raise")
    except ValueError:
        pass
    sh.free(buf)


def suite_cases(me: int, n: int, quick: bool = False) -> list:
    """The matrix as (name, check) cases for cases.run_cases."""
    rounds = 200 if quick else 1000
    return [
        ("rma", lambda: check_rma(me, n)),
        ("atomics", lambda: check_atomics(me, n, rounds)),
        ("signal", lambda: check_signal(me, n, 100 if quick else 500)),
        ("heap", lambda: check_heap(me, n)),
        ("errors", lambda: check_errors(me, n)),
    ]


def run_suite(quick: bool = False) -> None:
    me, n = sh.my_pe(), sh.n_pes()
    run_cases(me, suite_cases(me, n, quick))
    sh.barrier_all()
    if me == 0:
        print(f"shmem suite passed on {n} PEs")


if __name__ == "__main__":
    sh.init()
    run_suite(quick="--quick" in sys.argv)
    sh.finalize()
