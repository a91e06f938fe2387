# SPDX-License-Identifier: MIT
"""One process, both users of the host collective engine: the OpenSHMEM C API (loaded with
ctypes, initialized by its shmem_init) and mori.ccl, their world collectives interleaved in a
random order that every PE draws alike. They run on the same engine but on different groups
(the C API's world team, MORI-CCL's library world), so neither may take the other's messages,
staged parts or barrier arrivals. Sizes straddle the inbox's limits (message, staging, barrier
paths). Every result is checked exactly against values rebuilt from the shared seed.

    mori run -n N -- python ccl_capi_mix.py SEED
"""

from __future__ import annotations

import ctypes
import sys

import numpy as np

from mori.shmem.capi import paths

seed = int(sys.argv[1]) if len(sys.argv) > 1 else 1
lib = ctypes.CDLL(str(paths().lib_dir / "libmori_shmem.so"), mode=ctypes.RTLD_GLOBAL)
lib.shmem_malloc.restype = ctypes.c_void_p
lib.shmem_malloc.argtypes = [ctypes.c_size_t]
lib.shmem_free.argtypes = [ctypes.c_void_p]
lib.shmem_int64_sum_reduce.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
lib.shmem_fcollectmem.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
lib.shmem_broadcastmem.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
lib.shmem_init()
me, n = lib.shmem_my_pe(), lib.shmem_n_pes()
world = ctypes.addressof(ctypes.c_char.in_dll(lib, "mori_shmem_team_world"))

import mori.ccl as ccl  # noqa: E402  (after shmem_init: the runtime it uses is the C API's)

MAX = 40000  # int64 elements: past the inbox (128 of them) and the staging
src_p, dst_p = lib.shmem_malloc(MAX * 8), lib.shmem_malloc(n * MAX * 8)
src = np.ctypeslib.as_array(ctypes.cast(src_p, ctypes.POINTER(ctypes.c_int64)), shape=(MAX,))
dst = np.ctypeslib.as_array(ctypes.cast(dst_p, ctypes.POINTER(ctypes.c_int64)), shape=(n * MAX,))


def fail(what: str) -> None:
    print(f"PE {me}: FAIL {what} (seed {seed})", flush=True)
    sys.exit(1)


rng = np.random.default_rng(seed)  # the same draws on every PE
for it in range(120):
    kind = int(rng.integers(0, 6))
    count = int(rng.choice([1, 7, 128, 129, 1000, MAX]))
    data = rng.integers(-(2**40), 2**40, size=(n, count), dtype=np.int64)  # PE p's input is data[p]
    mine = data[me].copy()
    if kind == 0:  # C API reduction on the world team
        src[:count] = mine
        if lib.shmem_int64_sum_reduce(world, dst_p, src_p, count) != 0:
            fail("shmem_int64_sum_reduce returned non-zero")
        if not np.array_equal(dst[:count], data.sum(axis=0)):
            fail(f"shmem_int64_sum_reduce x{count} (iteration {it})")
    elif kind == 1:  # C API fcollect
        src[:count] = mine
        lib.shmem_fcollectmem(world, dst_p, src_p, count * 8)
        if not np.array_equal(dst[: n * count], data.reshape(-1)):
            fail(f"shmem_fcollectmem x{count} (iteration {it})")
    elif kind == 2:  # C API broadcast
        root = it % n
        src[:count] = mine
        lib.shmem_broadcastmem(world, dst_p, src_p, count * 8, root)
        if not np.array_equal(dst[:count], data[root]):
            fail(f"shmem_broadcastmem x{count} from {root} (iteration {it})")
    elif kind == 3:  # mori.ccl all-reduce on private memory
        ccl.all_reduce(mine, op="sum")
        if not np.array_equal(mine, data.sum(axis=0)):
            fail(f"ccl.all_reduce x{count} (iteration {it})")
    elif kind == 4:  # mori.ccl allgather
        out = np.empty(n * count, dtype=np.int64)
        ccl.all_gather_into_tensor(out, mine)
        if not np.array_equal(out, data.reshape(-1)):
            fail(f"ccl.all_gather_into_tensor x{count} (iteration {it})")
    else:  # mori.ccl broadcast
        root = it % n
        ccl.broadcast(mine, src=root)
        if not np.array_equal(mine, data[root]):
            fail(f"ccl.broadcast x{count} from {root} (iteration {it})")
    lib.shmem_barrier_all() if it % 17 == 0 else None

ccl.release()
lib.shmem_free(dst_p)
lib.shmem_free(src_p)
print(f"PE {me}: ccl+capi mix ok", flush=True)
lib.shmem_finalize()
