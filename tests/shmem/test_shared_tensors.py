# SPDX-License-Identifier: MIT
"""mori.shmem.shared_tensors: torch's CPU allocator over the PE's shared tensor arena.

The allocator is process-wide once installed, so the checks that change global state run in a
child interpreter; the fuzzing runs here (inside a scope, on tensors of its own)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from harness import check, mori_run

torch = pytest.importorskip("torch")
st = pytest.importorskip("mori.shmem.shared_arena")
hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings, strategies as s  # noqa: E402

import mori.shmem as sh  # noqa: E402


def run_child(code: str, env: dict | None = None, timeout: float = 120) -> str:
    import os

    full_env = dict(os.environ)
    full_env.update(env or {})
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_scope_size_threshold_and_release():
    out = run_child("""
        import threading, torch, mori.shmem as sh
        base = sh.shared_tensor_stats()["in_use"]
        big_out = torch.empty(1 << 20)                      # 4 MiB, outside any scope
        with sh.shared_tensors():
            big = torch.randn(1024, 1024)                   # 4 MiB: shared
            small = torch.randn(100)                        # under 1 MiB: private
            prod = big @ big[:, :16]                        # an op's output (64 KiB): private
            with sh.shared_tensors():
                nested = torch.ones(512, 1024)
            after_nested = torch.ones(512, 1024)            # still inside the outer scope
            other = []
            t = threading.Thread(target=lambda: other.append(torch.ones(512, 1024)))
            t.start(); t.join()                             # another thread: not in a scope
        outside = torch.ones(512, 1024)
        assert sh.is_shared_tensor(big) and sh.is_shared_tensor(big[3:7, 10:20])
        assert sh.is_shared_tensor(nested) and sh.is_shared_tensor(after_nested)
        assert not sh.is_shared_tensor(small) and not sh.is_shared_tensor(prod)
        assert not sh.is_shared_tensor(other[0]) and not sh.is_shared_tensor(outside)
        assert not sh.is_shared_tensor(big_out) and not sh.is_shared_tensor(torch.empty(0))
        assert not sh.shared_tensors_enabled()
        # Ordinary tensors: same values as private ones.
        ref = torch.randn(1024, 1024, generator=torch.Generator().manual_seed(1))
        with sh.shared_tensors():
            cp = ref.clone()
            res = cp * 3 + 1
        assert sh.is_shared_tensor(res) and torch.equal(res, ref * 3 + 1)
        live = sh.shared_tensor_stats()
        assert live["blocks"] == 5, live
        del big, nested, after_nested, cp, res
        end = sh.shared_tensor_stats()
        assert end["in_use"] == base and end["blocks"] == 0, end
        sh.set_shared_tensor_min_bytes(0)
        with sh.shared_tensors():
            tiny = torch.ones(3)
        assert sh.is_shared_tensor(tiny)
        try:
            sh.set_shared_tensor_min_bytes(-1)
        except ValueError as e:
            assert "nbytes" in str(e)
        else:
            raise AssertionError("negative min bytes accepted")
        sh.enable_shared_tensors()
        t = []
        th = threading.Thread(target=lambda: t.append(torch.ones(300, 1024)))
        th.start(); th.join()
        assert sh.is_shared_tensor(t[0]) and sh.shared_tensors_enabled()
        sh.enable_shared_tensors(False)
        assert not sh.is_shared_tensor(torch.ones(300, 1024))
        print("scope ok")
    """)
    assert "scope ok" in out


def test_full_arena_falls_back_to_private_memory():
    out = run_child(
        """
        import torch, mori.shmem as sh
        with sh.shared_tensors():
            a = torch.ones(3 << 20, dtype=torch.uint8)      # 3 MiB of a 4 MiB arena
            b = torch.ones(3 << 20, dtype=torch.uint8)      # does not fit: private, no error
        assert sh.is_shared_tensor(a) and not sh.is_shared_tensor(b)
        assert sh.shared_tensor_stats()["reserved"] == 4 << 20
        assert int(a.sum()) == 3 << 20 and int(b.sum()) == 3 << 20
        print("fallback ok")
    """,
        env={"MORI_SHARED_TENSOR_BYTES": "4MiB"},
    )
    assert "fallback ok" in out


def test_too_small_arena_setting_is_an_error_naming_it():
    code = """
        import torch, mori.shmem as sh
        with sh.shared_tensors():
            torch.ones(2 << 20, dtype=torch.uint8)
    """
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**__import__("os").environ, "MORI_SHARED_TENSOR_BYTES": "4096"},
    )
    assert proc.returncode != 0 and "MORI_SHARED_TENSOR_BYTES" in proc.stderr, proc.stderr


def test_fork_child_never_allocates_from_the_parents_arena():
    out = run_child("""
        import os, torch, mori.shmem as sh
        torch.set_num_threads(1)  # OpenMP's pool does not survive fork(); this test is about the arena
        with sh.shared_tensors():
            inherited = torch.zeros(1 << 20)
        pid = os.fork()
        if pid == 0:
            ok = True
            with sh.shared_tensors():
                mine = torch.ones(1 << 20)
            ok &= not sh.is_shared_tensor(mine)            # the child's block table is not its parent's
            inherited[0] = 42.0                            # documented: the pages are shared
            del inherited                                  # the parent's block stays the parent's
            os._exit(0 if ok else 3)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, status
        assert float(inherited[0]) == 42.0
        with sh.shared_tensors():
            again = torch.ones(1 << 20)
        assert sh.is_shared_tensor(again)
        assert again.data_ptr() != inherited.data_ptr()
        print("fork ok")
    """)
    assert "fork ok" in out


def test_trim_gives_free_blocks_back_and_keeps_live_ones():
    out = run_child("""
        import torch, mori.shmem as sh

        def arena_rss_kib():
            # Resident memory of the arena's mapping (its memfd is named mori-tensors-PID).
            rss, inside = 0, False
            for line in open("/proc/self/smaps"):
                if line[0] in "0123456789abcdef" and "-" in line.split()[0]:
                    inside = "mori-tensors-" in line
                elif inside and line.startswith("Rss:"):
                    rss += int(line.split()[1])
            return rss

        with sh.shared_tensors():
            keep = torch.full((8 << 20,), 7, dtype=torch.uint8)
            drop = torch.full((32 << 20,), 9, dtype=torch.uint8)
        full = arena_rss_kib()
        assert full >= 40 << 10, full
        del drop
        assert arena_rss_kib() == full                      # freed, still committed
        released = sh.shared_tensor_trim()
        assert released >= 32 << 20, released
        after = arena_rss_kib()
        assert after <= (8 << 10) + 8, (full, after)
        assert int(keep.min()) == 7 and int(keep.max()) == 7  # a live tensor keeps its bytes
        with sh.shared_tensors():
            again = torch.full((32 << 20,), 5, dtype=torch.uint8)  # reusing trimmed pages works
        assert int(again.min()) == 5 and int(again.max()) == 5
        print("trim ok", full, after)
    """)
    assert "trim ok" in out


@settings(max_examples=30, deadline=None)
@given(s.lists(s.tuples(s.integers(min_value=1, max_value=3 << 20), s.booleans()), min_size=1, max_size=24))
def test_fuzzed_allocations_never_overlap(plan):
    """Random sizes allocated and freed in random order: every live tensor keeps its own bytes."""

    def exercise() -> None:
        live: list[tuple[int, torch.Tensor]] = []
        with sh.shared_tensors():
            for i, (nbytes, free_one) in enumerate(plan):
                live.append((i % 251, torch.full((nbytes,), i % 251, dtype=torch.uint8)))
                if free_one and len(live) > 1:
                    live.pop(len(live) // 2)
        for value, t in live:
            assert int(t.min()) == value and int(t.max()) == value, f"a tensor of {t.numel()} bytes was overwritten"

    before = sh.shared_tensor_stats()["in_use"]
    exercise()  # every tensor it made is gone when it returns
    assert sh.shared_tensor_stats()["in_use"] == before


def test_env_setting_enables_shared_tensors_with_the_op():
    """MORI_SHARED_TENSORS=1: an EP op on a CPU PE turns shared tensors on for the process, so an
    unchanged integration's expert output is read in place."""
    code = (
        "import torch, mori.shmem as sh\n"
        "from mori.ops import EpDispatchCombineConfig as C, EpDispatchCombineOp as Op\n"
        "sh.shmem_init(); me = sh.shmem_mype()\n"
        "op = Op(C(data_type=torch.bfloat16, rank=me, world_size=2, hidden_dim=4096, scale_dim=0, scale_type_size=4,"
        " max_token_type_size=2, max_num_inp_token_per_rank=128, num_experts_per_rank=2, num_experts_per_token=2))\n"
        "x = torch.randn(128, 4096).to(torch.bfloat16); idx = torch.tensor([[0, 3]] * 128, dtype=torch.int32)\n"
        "out = op.dispatch(x, None, None, idx); n = int(out[4][0])\n"
        "y = (out[0][:n].float() * 2).to(torch.bfloat16)\n"
        "assert sh.is_shared_tensor(y), 'expert output not shared'\n"
        "got, _ = op.combine(y, None, idx)\n"
        "assert op.last_combine_in_place_peers() == 1\n"
        "assert torch.equal(got[:128], (x.float() * 4).to(torch.bfloat16))\n"
        "print('env ok on PE', me)\n"
        "del op; sh.shmem_finalize()\n"
    )
    out = check(
        mori_run(
            2,
            [sys.executable, "-c", code],
            timeout=120,
            env={"MORI_SHARED_TENSORS": "1", "MORI_SHARED_TENSOR_BYTES": "1GiB"},
        )
    )
    assert out.count("env ok on PE") == 2
