# SPDX-License-Identifier: MIT
"""SGLang HiCache's ``mori`` backend (UMBPStore) call sequence against mori.umbp, written fresh
from what that backend does: a page-first host KV pool, SGLang's key scheme, ``batch_set_v1`` ->
``batch_put_from_ptr_with_depth`` / ``batch_put_from_ptr``, ``batch_get_v1`` ->
``batch_get_into_ptr`` into other pages of the pool, ``batch_exists`` ->
``batch_exists_consecutive(...) // keys_per_page``, a partial prefix hit, ``clear()``.

Two pool shapes: DeepSeek-V3's MLA page (page_size 64 x (kv_lora_rank 512 + qk_rope_head_dim 64)
x bf16 x 5 layers = 368,640 B, one key per page, ``{hash}__k``) and an MHA model's K and V pages
(two keys per page, ``{hash}_{tp}_k`` / ``{hash}_{tp}_v``). Every page holds fresh random bits and
every get is checked bit for bit.
"""

from __future__ import annotations

import ctypes
import hashlib
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Optional

import pytest

torch = pytest.importorskip("torch")
umbp = pytest.importorskip("mori.umbp")

pytestmark = pytest.mark.timeout(120)

MLA_PAGE_BYTES = 64 * (512 + 64) * 2 * 5
assert MLA_PAGE_BYTES == 368_640


def page_hashes(n: int, salt: str) -> list[str]:
    """SGLang's page keys: a chained SHA-256 of the page's tokens (here of a counter)."""
    out, prev = [], salt.encode()
    for i in range(n):
        prev = hashlib.sha256(prev + i.to_bytes(8, "little")).digest()
        out.append(prev.hex())
    return out


@dataclass
class HostBuffer:
    """Host memory from UMBPHostMemAllocator, seen as a torch tensor."""

    handle: object
    tensor: "torch.Tensor"

    @classmethod
    def alloc(cls, allocator, nbytes: int, backing) -> "HostBuffer":
        handle = allocator.alloc(nbytes, backing)
        assert handle and handle.ptr and handle.mapped_size >= nbytes
        raw = (ctypes.c_uint8 * nbytes).from_address(int(handle.ptr))
        return cls(handle, torch.frombuffer(raw, dtype=torch.uint8))


class PageFirstMLAPool:
    """SGLang's MLA host pool with the page_first layout: [token, layer, 1, kv_cache_dim] bf16;
    one page (page_size tokens x every layer) is one contiguous value."""

    is_mla = True

    def __init__(
        self, buffer: "torch.Tensor", pages: int, page_size: int = 64, layers: int = 5, kv_cache_dim: int = 512 + 64
    ) -> None:
        self.page_size, self.layers, self.dim = page_size, layers, kv_cache_dim
        self.size = pages * page_size
        self.kv_buffer = (
            buffer[: self.size * layers * kv_cache_dim * 2]
            .view(torch.bfloat16)
            .view(self.size, layers, 1, kv_cache_dim)
        )

    def page_bytes(self) -> int:
        return self.layers * self.page_size * self.dim * 2

    def get_page_buffer_meta(self, indices: "torch.Tensor") -> tuple[list[int], list[int]]:
        base = self.kv_buffer.data_ptr()
        idx = indices.tolist()
        ptrs = [base + idx[i] * self.layers * self.dim * 2 for i in range(0, len(idx), self.page_size)]
        return ptrs, [self.page_bytes()] * len(ptrs)

    def page(self, p: int) -> "torch.Tensor":
        return self.kv_buffer[p * self.page_size : (p + 1) * self.page_size]


class PageFirstMHAPool:
    """SGLang's MHA host pool with the page_first layout: [2 (K, V), token, layer, head, head_dim]
    bf16; a page's K and its V are two values, the V half one whole buffer further on."""

    is_mla = False

    def __init__(
        self,
        buffer: "torch.Tensor",
        pages: int,
        page_size: int = 16,
        layers: int = 4,
        heads: int = 8,
        head_dim: int = 64,
    ) -> None:
        self.page_size, self.layers, self.heads, self.head_dim = page_size, layers, heads, head_dim
        self.size = pages * page_size
        n = 2 * self.size * layers * heads * head_dim
        self.kv_buffer = buffer[: n * 2].view(torch.bfloat16).view(2, self.size, layers, heads, head_dim)

    def page_bytes(self) -> int:
        return self.layers * self.page_size * self.heads * self.head_dim * 2

    def get_page_buffer_meta(self, indices: "torch.Tensor") -> tuple[list[int], list[int]]:
        base = self.kv_buffer.data_ptr()
        v_offset = self.layers * self.size * self.heads * self.head_dim * 2
        idx = indices.tolist()
        ptrs = []
        for i in range(0, len(idx), self.page_size):
            k = base + idx[i] * self.layers * self.heads * self.head_dim * 2
            ptrs += [k, k + v_offset]
        return ptrs, [self.page_bytes()] * len(ptrs)

    def page(self, p: int) -> "torch.Tensor":
        return self.kv_buffer[:, p * self.page_size : (p + 1) * self.page_size]


class HiCacheUmbpCalls:
    """The calls SGLang's UMBPStore makes on a UMBPClient, for one TP rank (no PP, no head split)."""

    def __init__(self, client, pool, tp_rank: int = 0) -> None:
        self.client, self.pool, self.tp_rank = client, pool, tp_rank
        self.keys_per_page = 1 if pool.is_mla else 2

    def component_keys(self, keys: list[str]) -> list[str]:
        if self.pool.is_mla:
            return [f"{k}__k" for k in keys]  # mla_suffix is "" without PP
        return [s for k in keys for s in (f"{k}_{self.tp_rank}_k", f"{k}_{self.tp_rank}_v")]

    def host_indices(self, pages: list[int]) -> "torch.Tensor":
        ps = self.pool.page_size
        return torch.cat([torch.arange(p * ps, (p + 1) * ps, dtype=torch.int64) for p in pages])

    def per_page(self, results: list[bool]) -> list[bool]:
        k = self.keys_per_page
        return [all(results[i : i + k]) for i in range(0, len(results), k)]

    def batch_set_v1(self, keys: list[str], pages: list[int], prefix_keys: Optional[list[str]] = None) -> list[bool]:
        indices = self.host_indices(pages)
        assert len(keys) == len(indices) // self.pool.page_size
        ptrs, sizes = self.pool.get_page_buffer_meta(indices)
        ckeys = self.component_keys(keys)
        if prefix_keys is not None:
            depths = [len(prefix_keys) + i for i in range(len(keys)) for _ in range(self.keys_per_page)]
            res = self.client.batch_put_from_ptr_with_depth(ckeys, ptrs, sizes, depths)
        else:
            res = self.client.batch_put_from_ptr(ckeys, ptrs, sizes)
        return self.per_page(list(res))

    def batch_get_v1(self, keys: list[str], pages: list[int]) -> list[bool]:
        ptrs, sizes = self.pool.get_page_buffer_meta(self.host_indices(pages))
        return self.per_page(list(self.client.batch_get_into_ptr(self.component_keys(keys), ptrs, sizes)))

    def batch_exists(self, keys: list[str]) -> int:
        return self.client.batch_exists_consecutive(self.component_keys(keys)) // self.keys_per_page


def fill_random(pool, pages: range, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    for p in pages:
        page = pool.page(p)
        bits = torch.randint(-(1 << 15), 1 << 15, page.shape, dtype=torch.int16, generator=gen)
        page.view(torch.int16).copy_(bits)
        assert torch.count_nonzero(page.view(torch.int16)) > 0


def zero_pages(pool, pages: range) -> None:
    for p in pages:
        pool.page(p).view(torch.int16).zero_()


def same_bits(pool, a: int, b: int) -> bool:
    return torch.equal(pool.page(a).view(torch.int16), pool.page(b).view(torch.int16))


def local_config(storage_dir: str, dram_bytes: int):
    cfg = umbp.UMBPConfig.from_environment()
    cfg.role = umbp.UMBPRole.Standalone  # as UMBPStore forces it
    cfg.dram.capacity_bytes = dram_bytes
    cfg.ssd.enabled = True
    cfg.ssd.storage_dir = storage_dir
    cfg.ssd.capacity_bytes = 256 << 20
    return cfg


def make_pool(kind: str, pages: int, backing=None):
    page = MLA_PAGE_BYTES if kind == "mla" else 2 * 4 * 16 * 8 * 64 * 2
    allocator = umbp.UMBPHostMemAllocator()
    buf = HostBuffer.alloc(
        allocator, pages * page, backing if backing is not None else umbp.UMBPHostBufferBacking.Anonymous
    )
    pool = PageFirstMLAPool(buf.tensor, pages) if kind == "mla" else PageFirstMHAPool(buf.tensor, pages)
    assert pool.page_bytes() * (1 if kind == "mla" else 2) * pages <= buf.tensor.numel()
    return allocator, buf, pool


def run_sequence(store: HiCacheUmbpCalls, seed: int) -> None:
    """The sequence of one prefill/decode round trip through L3, as HiCache drives it."""
    pool, n = store.pool, 8
    fill_random(pool, range(0, n), seed)
    zero_pages(pool, range(n, 2 * n))
    keys = page_hashes(n, f"seq-{seed}")
    prefix = page_hashes(3, f"prefix-{seed}")

    # Nothing stored yet: no hit.
    assert store.batch_exists(keys) == 0
    # Write-back of the first 6 pages with radix-tree depths (the prefix is 3 pages deep) ...
    assert store.batch_set_v1(keys[:6], list(range(6)), prefix_keys=prefix) == [True] * 6
    # ... and of pages 6, 7 without (plain LRU), the way a set without extra_info goes.
    assert store.batch_set_v1(keys[6:], [6, 7]) == [True, True]
    assert store.batch_exists(keys) == n
    assert store.batch_exists(keys + page_hashes(2, f"miss-{seed}")) == n

    # Prefetch into OTHER pages of the pool (n .. 2n-1); bit for bit.
    assert store.batch_get_v1(keys, list(range(n, 2 * n))) == [True] * n
    for p in range(n):
        assert same_bits(pool, p, n + p), f"page {p} came back different"

    # A partial prefix hit: a page in the middle was never stored; exists stops there and only
    # the prefix is fetched.
    hole = page_hashes(1, f"hole-{seed}")
    probe = keys[:3] + hole + keys[3:]
    assert store.batch_exists(probe) == 3
    assert store.batch_get_v1(probe[:4], [2 * n - 4, 2 * n - 3, 2 * n - 2, 2 * n - 1]) == [True, True, True, False]
    for p in range(3):
        assert same_bits(pool, p, 2 * n - 4 + p)

    # A repeated set keeps the original value (content-addressed keys: the same hash, the same KV).
    original = pool.page(0).clone()
    fill_random(pool, range(0, 1), seed + 1)
    assert store.batch_set_v1(keys[:1], [0]) == [True]
    zero_pages(pool, range(n, n + 1))
    assert store.batch_get_v1(keys[:1], [n]) == [True]
    assert torch.equal(pool.page(n).view(torch.int16), original.view(torch.int16))
    assert not same_bits(pool, 0, n)

    assert store.client.clear()
    assert store.batch_exists(keys) == 0
    assert store.batch_get_v1(keys[:2], [n, n + 1]) == [False, False]


@pytest.mark.parametrize("kind", ["mla", "mha"])
def test_sglang_sequence_local(tmp_path, kind):
    allocator, buf, pool = make_pool(kind, pages=16)
    try:
        client = umbp.UMBPClient(local_config(str(tmp_path / "ssd"), dram_bytes=64 << 20))
        assert client.get_deployment_mode() == umbp.UMBPDeploymentMode.Local
        assert not client.is_distributed()
        store = HiCacheUmbpCalls(client, pool, tp_rank=0 if kind == "mla" else 1)
        run_sequence(store, seed=11)
        if kind == "mha":
            # A page whose K is stored but not its V is no hit: the count of K/V keys (3) // 2.
            keys = page_hashes(2, "half")
            assert store.batch_set_v1(keys[:1], [0]) == [True]
            ptrs, sizes = pool.get_page_buffer_meta(store.host_indices([1]))
            assert client.batch_put_from_ptr([f"{keys[1]}_1_k"], ptrs[:1], sizes[:1]) == [True]
            assert client.batch_exists_consecutive(store.component_keys(keys)) == 3
            assert store.batch_exists(keys) == 1
            assert store.batch_get_v1(keys, [2, 3]) == [True, False]
        client.close()
    finally:
        allocator.free(buf.handle)


def test_sglang_sequence_mla_pages_from_ssd(tmp_path):
    """DRAM holds two MLA pages: most of the 8 come back from the SSD tier, still bit for bit."""
    allocator, buf, pool = make_pool("mla", pages=16)
    try:
        client = umbp.UMBPClient(local_config(str(tmp_path / "ssd"), dram_bytes=2 * MLA_PAGE_BYTES + 4096))
        store = HiCacheUmbpCalls(client, pool)
        fill_random(pool, range(8), seed=5)
        keys = page_hashes(8, "ssd")
        assert store.batch_set_v1(keys, list(range(8)), prefix_keys=[]) == [True] * 8
        assert client.flush()
        assert store.batch_exists(keys) == 8
        assert store.batch_get_v1(keys, list(range(8, 16))) == [True] * 8
        for p in range(8):
            assert same_bits(pool, p, 8 + p)
        assert client.clear() and store.batch_exists(keys) == 0
        client.close()
    finally:
        allocator.free(buf.handle)


# ---------------------------------------------------------------------------------------------
# Once through the per-host server (standalone-process mode)


def _server_missing() -> str:
    if not hasattr(umbp, "UMBPStandaloneProcessConfig"):
        return "mori.umbp has no UMBPStandaloneProcessConfig in this build"
    proc = subprocess.run(
        [sys.executable, "-m", "mori.apps.cli", "umbp-server", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    if proc.returncode != 0:
        return "this build's mori command has no umbp-server (umbp-server's work is not merged)"
    return ""


@pytest.fixture
def umbp_server(tmp_path):
    why = _server_missing()
    if why:
        pytest.skip(why)
    sock = tmp_path / "umbp.sock"
    log = open(tmp_path / "server.log", "wb")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mori.apps.cli",
            "umbp-server",
            "--address",
            f"unix://{sock}",
            "--dram-capacity",
            str(64 << 20),
            "--ssd-dir",
            str(tmp_path / "ssd"),
            "--ssd-capacity",
            str(256 << 20),
        ],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 30
    while not sock.exists():
        assert proc.poll() is None, (tmp_path / "server.log").read_text()
        assert time.monotonic() < deadline, "mori umbp-server did not open its socket within 30 s"
        time.sleep(0.05)
    yield f"unix://{sock}"
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    log.close()


def test_sglang_sequence_through_per_host_server(umbp_server):
    allocator, buf, pool = make_pool("mla", pages=16, backing=umbp.UMBPHostBufferBacking.AnonymousShm)
    try:
        cfg = umbp.UMBPConfig.from_environment()
        cfg.role = umbp.UMBPRole.Standalone
        sp = umbp.UMBPStandaloneProcessConfig()
        sp.address = umbp_server
        sp.startup_timeout_ms = 30000
        cfg.standalone_process = sp
        client = umbp.UMBPClient(cfg)
        assert client.get_deployment_mode() == umbp.UMBPDeploymentMode.StandaloneProcess
        # UMBPStore registers the whole host pool once; the server maps it (memfd).
        assert client.register_memory(int(buf.handle.ptr), int(buf.handle.mapped_size))
        run_sequence(HiCacheUmbpCalls(client, pool), seed=23)
        client.deregister_memory(int(buf.handle.ptr))
        client.close()
    finally:
        allocator.free(buf.handle)
