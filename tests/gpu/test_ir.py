# SPDX-License-Identifier: MIT
"""MORI-IR: the device-function table, the wrapper source and bitcode made from it, find_bitcode's
errors, Triton's compile of kernels against the bitcode (CPU only), and Triton kernels calling
the device API on 2+ PEs (GPU; MORI_TEST_GPU_PES lets PEs share one GPU)."""
from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess

import pytest

from harness import check, gpu_pe_counts, mori_run, python_program
from mori import _C
from mori.core.errors import InvalidArgument, Unavailable
from mori.ir import MORI_DEVICE_FUNCTIONS, SIGNAL_ADD, SIGNAL_SET, STATE_SYMBOL, find_bitcode, get_bitcode_path
from mori.ir import codegen
from mori.ir.bitcode import installed_dir
from mori.ir.functions import C_TYPES

_HAS_TRITON = importlib.util.find_spec("triton") is not None
_C_TO_ABI = {"int32_t": "int32", "uint32_t": "uint32", "int64_t": "int64", "uint64_t": "uint64", "float": "float32",
             "double": "float64"}


def _any_bitcode() -> str | None:
    try:
        return find_bitcode("sm_90", build=False)
    except Unavailable:
        return None


def test_table_is_mori_abi() -> None:
    # MORI's numbering of the signal operations, and its names for the functions every kernel uses
    assert (SIGNAL_SET, SIGNAL_ADD) == (9, 10)
    for name in ("my_pe", "n_pes", "ptr_p2p", "ptr", "putmem_nbi_thread", "putmem_nbi_warp", "putmem_nbi_block",
                 "put_float_nbi_block", "putmem_nbi_signal_block", "int64_p", "uint64_atomic_fetch_add_thread",
                 "uint64_wait_until_greater_than", "quiet_thread", "fence_thread", "barrier_all_thread",
                 "barrier_all_block"):
        row = MORI_DEVICE_FUNCTIONS[name]
        assert row["symbol"] == f"mori_shmem_{name}"
        assert set(row["args"]) <= set(C_TYPES) and row["ret"] in C_TYPES
    assert MORI_DEVICE_FUNCTIONS["putmem_nbi_signal_block"]["args"] == [
        "uint64", "uint64", "uint64", "uint64", "uint64", "int32", "int32", "int32"]


def test_wrapper_source_defines_the_table_name_for_name() -> None:
    src = codegen.render()
    defined = {}
    for ret, symbol, params in re.findall(r"^__device__ (\w+) (mori_shmem_\w+)\(([^)]*)\) \{", src, re.M):
        args = [_C_TO_ABI[p.split()[0]] for p in params.split(",") if p.strip()]
        assert symbol not in defined, f"{symbol} defined twice"
        defined[symbol] = {"args": args, "ret": _C_TO_ABI[ret]}
    expected = {row["symbol"]: {"args": row["args"], "ret": row["ret"]} for row in MORI_DEVICE_FUNCTIONS.values()}
    assert defined == expected
    assert f"__device__ mori::shmem::DeviceState {STATE_SYMBOL};" in src


def _bitcode_symbols(path: str) -> set[str] | None:
    """Defined external symbols, by the newest llvm-nm that reads this bitcode (None: none can)."""
    for name in (*(f"llvm-nm-{v}" for v in range(22, 16, -1)), "llvm-nm"):
        if shutil.which(name):
            proc = subprocess.run([name, "--defined-only", "--extern-only", path], capture_output=True, text=True,
                                  timeout=60)
            if proc.returncode == 0:
                return {line.split()[-1] for line in proc.stdout.splitlines() if line.strip()}
    return None


@pytest.mark.skipif(_any_bitcode() is None, reason="no sm_90 bitcode built here")
def test_bitcode_defines_the_table_name_for_name() -> None:
    symbols = _bitcode_symbols(_any_bitcode())
    if symbols is None:
        pytest.skip("no llvm-nm here that reads this bitcode")
    assert symbols == {row["symbol"] for row in MORI_DEVICE_FUNCTIONS.values()} | {STATE_SYMBOL}


def test_state_symbol_is_the_one_module_init_fills() -> None:
    from mori.shmem import module_init
    assert module_init.STATE_SYMBOL == STATE_SYMBOL


def test_module_init_rejects_a_bad_module() -> None:
    from mori.shmem import shmem_module_init
    for bad in (0, None, "module"):
        with pytest.raises(InvalidArgument, match="module"):
            shmem_module_init(bad)


def test_find_bitcode_errors_name_what_is_missing(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("MORI_IR_BITCODE", raising=False)
    monkeypatch.setenv("MORI_IR_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("MORI_IR_CLANG", str(tmp_path / "no-such-clang"))
    with pytest.raises(InvalidArgument, match="path"):
        find_bitcode("sm_90", path=tmp_path / "missing.bc")
    with pytest.raises(InvalidArgument, match="arch"):
        find_bitcode("90")
    with pytest.raises(Unavailable, match="looked at .*libmori_shmem_device_sm_121.bc"):
        get_bitcode_path("sm_121")
    with pytest.raises(Unavailable, match="no clang with the NVPTX target.*MORI_IR_BITCODE"):
        find_bitcode("sm_121")
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").rglob("*.bc"))
    monkeypatch.setenv("MORI_IR_BITCODE", str(tmp_path / "gone.bc"))
    with pytest.raises(InvalidArgument, match="MORI_IR_BITCODE"):
        find_bitcode("sm_90")
    real = tmp_path / "given.bc"
    real.write_bytes(b"BC")
    monkeypatch.setenv("MORI_IR_BITCODE", str(real))
    assert find_bitcode() == str(real.resolve())  # the env wins over arch detection


@pytest.mark.skipif(not _HAS_TRITON, reason="triton is not installed")
def test_triton_wrappers_cover_the_table() -> None:
    from mori.ir.triton import mori_shmem_device
    for name, row in MORI_DEVICE_FUNCTIONS.items():
        fn = getattr(mori_shmem_device, name)
        assert row["symbol"] in fn.__doc__


@pytest.mark.skipif(not _HAS_TRITON, reason="triton is not installed")
def test_install_hook_registers_once_on_module_load() -> None:
    from triton import knobs
    from mori.ir.triton import install_hook
    install_hook()
    install_hook()
    chain = knobs.runtime.kernel_load_end_hook
    assert [c.__name__ for c in chain.calls].count("_on_module_load") == 1


@pytest.mark.skipif(not _HAS_TRITON or _any_bitcode() is None, reason="needs triton and the sm_90 bitcode")
def test_triton_compiles_a_kernel_against_the_bitcode() -> None:
    """Triton links the bitcode into a kernel for sm_90 down to a cubin (no GPU needed)."""
    import triton
    import triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from mori.ir.triton import get_extern_libs, mori_shmem_device as msd

    @triton.jit
    def kernel(dst, src, sig, counter, nbytes):
        peer = (msd.my_pe() + 1) % msd.n_pes()
        msd.putmem_nbi_signal_block(dst, src, nbytes, sig, 1, 10, peer, 0)
        tl.store(counter + 1, msd.uint64_atomic_fetch_add_thread(counter, 1, peer, 0))
        msd.barrier_all_block()

    sig = {"dst": "*u8", "src": "*u8", "sig": "*u64", "counter": "*u64", "nbytes": "i64"}
    compiled = triton.compile(ASTSource(kernel, sig, {}), target=GPUTarget("cuda", 90, 32),
                              options={"extern_libs": tuple(get_extern_libs("sm_90").items())})
    ptx = compiled.asm["ptx"]
    assert re.search(rf"\.visible \.global \.align 8 \.b8 {STATE_SYMBOL}\[\d+\];", ptx)
    assert "atom.add.release.sys.u64" in ptx  # SIGNAL_ADD: a release at system scope
    assert "atom.add.relaxed.sys.u64" in ptx  # fetch_add: relaxed at system scope
    assert ".extern .func mori_shmem_" not in ptx  # every call resolved from the bitcode
    assert not re.search(r"call(\.uni)?\s[^\n]*mori_shmem_", ptx)  # and inlined: no call a kernel can see
    assert len(compiled.asm["cubin"]) > 0


@pytest.mark.skipif(not _HAS_TRITON or _any_bitcode() is None, reason="needs triton and the sm_90 bitcode")
def test_triton_block_put_copies_16_bytes_per_access_in_registers() -> None:
    """The inlined block put moves 16-byte vectors kept in registers, as nvcc's put does: an aggregate
    uint4 copy left clang's unrolled registers on the stack (ld.local) and split each access in two,
    which made big Triton puts 2.5x slower than the CUDA C++ put."""
    import triton
    import triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from mori.ir.triton import get_extern_libs, mori_shmem_device as msd

    @triton.jit
    def put_kernel(dst, src, nbytes, pe):
        msd.putmem_nbi_block(dst, src, nbytes, pe, 0)

    sig = {"dst": "*u8", "src": "*u8", "nbytes": "i64", "pe": "i32"}
    ptx = triton.compile(ASTSource(put_kernel, sig, {}), target=GPUTarget("cuda", 90, 32),
                         options={"num_warps": 8, "extern_libs": tuple(get_extern_libs("sm_90").items())}).asm["ptx"]
    assert len(re.findall(r"\bld(\.global)?\.v4\.b32\s", ptx)) >= 4, "no 4-deep unrolled 16-byte loads"
    assert len(re.findall(r"\bst(\.global)?\.v4\.b32\s", ptx)) >= 4, "no 4-deep unrolled 16-byte stores"
    assert "ld.local" not in ptx, "the copy loop goes through local memory"


# ------------------------------------------------------------------ GPU

_NO_CUDA = not _C.shmem.built_with_cuda()
_PES = [] if _NO_CUDA else gpu_pe_counts(_C.shmem.cuda_device_count())
GPU_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1",
           "MORI_SHMEM_GPU_HEAP_SIZE": "512M", "MORI_SHMEM_HEAP_SIZE": "256M", "MORI_BOOTSTRAP_TIMEOUT": "60"}
CHECKS = ("query", "ptr_p2p", "put_signal", "fetch_add", "barrier", "allreduce", "ring_allreduce")


@pytest.mark.gpu
@pytest.mark.skipif(_NO_CUDA, reason="MORI was built without CUDA")
@pytest.mark.skipif(not _HAS_TRITON, reason="triton is not installed")
@pytest.mark.skipif(not _PES, reason="needs 2 CUDA GPUs (or MORI_TEST_GPU_PES and one)")
@pytest.mark.parametrize("pes", _PES or [2])
def test_triton_kernels_call_the_device_api(pes: int) -> None:
    out = check(mori_run(pes, python_program("ir_triton_suite.py", *CHECKS), timeout=240, env=GPU_ENV))
    for name in CHECKS:
        assert f"PASS {name}" in out, f"check {name} did not pass on {pes} PEs:\n{out[-6000:]}"


@pytest.mark.gpu
@pytest.mark.skipif(_NO_CUDA, reason="MORI was built without CUDA")
@pytest.mark.skipif(not _HAS_TRITON, reason="triton is not installed")
@pytest.mark.skipif(not _PES, reason="needs 2 CUDA GPUs (or MORI_TEST_GPU_PES and one)")
def test_put_to_a_missing_pe_fails_the_launch() -> None:
    proc = mori_run(2, python_program("ir_triton_suite.py", "bad_pe"), timeout=180, env=GPU_ENV)
    out = proc.stdout + proc.stderr
    assert out.count("TRAPPED PE") == 2, f"a put to PE n_pes did not fail the launch on both PEs:\n{out[-6000:]}"
