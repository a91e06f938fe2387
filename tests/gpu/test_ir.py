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
from mori.ir import (
    AMO_TYPES,
    MORI_DEVICE_FUNCTIONS,
    SIGNAL_ADD,
    SIGNAL_SET,
    STATE_SYMBOL,
    find_bitcode,
    get_bitcode_path,
)
from mori.ir import codegen
from mori.ir.functions import C_TYPES

_HAS_TRITON = importlib.util.find_spec("triton") is not None
_C_TO_ABI = {
    "int8_t": "int8",
    "uint8_t": "uint8",
    "int16_t": "int16",
    "uint16_t": "uint16",
    "int32_t": "int32",
    "uint32_t": "uint32",
    "int64_t": "int64",
    "uint64_t": "uint64",
    "float": "float32",
    "double": "float64",
}


def _any_bitcode() -> str | None:
    try:
        return find_bitcode("sm_90", build=False)
    except Unavailable:
        return None


def test_table_is_mori_abi() -> None:
    # MORI's numbering of the signal operations, and its names for the functions every kernel uses
    assert (SIGNAL_SET, SIGNAL_ADD) == (9, 10)
    for name in (
        "my_pe",
        "n_pes",
        "ptr_p2p",
        "ptr",
        "putmem_nbi_thread",
        "putmem_nbi_warp",
        "putmem_nbi_block",
        "put_float_nbi_block",
        "putmem_nbi_signal_block",
        "int64_p",
        "uint64_atomic_fetch_add_thread",
        "uint64_wait_until_greater_than",
        "quiet_thread",
        "fence_thread",
        "barrier_all_thread",
        "barrier_all_block",
    ):
        row = MORI_DEVICE_FUNCTIONS[name]
        assert row["symbol"] == f"mori_shmem_{name}"
        assert set(row["args"]) <= set(C_TYPES) and row["ret"] in C_TYPES
    assert MORI_DEVICE_FUNCTIONS["putmem_nbi_signal_block"]["args"] == [
        "uint64",
        "uint64",
        "uint64",
        "uint64",
        "uint64",
        "int32",
        "int32",
        "int32",
    ]


def _mori_names() -> set[str]:
    """Every function name of MORI's device table and device header (ROCm/mori python/mori/ir/ops.py,
    include/mori/shmem/shmem_device_api_wrapper.hpp), spelled out by family."""
    names = {
        "my_pe",
        "n_pes",
        "ptr_p2p",
        "ptr",
        "barrier_all_thread",
        "barrier_all_block",
        "put_size_imm_nbi_thread",
        "atomic_size_nonfetch_thread",
    }
    names |= {f"{op}_thread{pe}" for op in ("quiet", "fence") for pe in ("", "_pe", "_pe_qp")}
    for scope in ("thread", "warp", "block"):
        names.add(f"putmem_nbi_signal_{scope}")
        for blocking in ("_nbi", ""):
            names |= {f"putmem{blocking}_{scope}", f"getmem{blocking}_{scope}"}
            names |= {
                f"{op}_{t}{blocking}_{scope}" for op in ("put", "get") for t in ("uint32", "uint64", "float", "double")
            }
    names |= {
        f"{t}_p"
        for t in (
            "int32",
            "int64",
            "uint32",
            "uint64",
            "int",
            "long",
            "longlong",
            "float",
            "double",
            "char",
            "short",
            "uint",
            "ulong",
            "ulonglong",
            "uchar",
            "ushort",
        )
    }
    names |= {f"atomic_{t}_{kind}_thread" for t in ("uint32", "uint64", "int64") for kind in ("fetch", "nonfetch")}
    names |= {f"{t}_atomic_{op}_thread" for t in ("uint32", "uint64", "int64") for op in ("add", "fetch_add")}
    names |= {f"{t}_wait_until_{c}" for t in ("uint32", "uint64", "int32", "int64") for c in ("greater_than", "equals")}
    return names


def test_every_mori_device_function_is_in_the_table() -> None:
    assert sorted(_mori_names() - set(MORI_DEVICE_FUNCTIONS)) == []


def test_generic_atomics_and_size_imm_have_mori_abi() -> None:
    # MORI's atomicType numbering (NVSHMEM's too); 11 (end of the non-fetching ones) is no operation
    assert AMO_TYPES == {
        "AMO_ACK": 1,
        "AMO_INC": 2,
        "AMO_SET": 3,
        "AMO_ADD": 4,
        "AMO_AND": 5,
        "AMO_OR": 6,
        "AMO_XOR": 7,
        "AMO_SIGNAL": 8,
        "AMO_SIGNAL_SET": 9,
        "AMO_SIGNAL_ADD": 10,
        "AMO_FETCH": 12,
        "AMO_FETCH_INC": 13,
        "AMO_FETCH_ADD": 14,
        "AMO_FETCH_AND": 15,
        "AMO_FETCH_OR": 16,
        "AMO_FETCH_XOR": 17,
        "AMO_SWAP": 18,
        "AMO_COMPARE_SWAP": 19,
    }
    for t in ("uint32", "uint64", "int64"):
        assert MORI_DEVICE_FUNCTIONS[f"atomic_{t}_fetch_thread"] == {
            "symbol": f"mori_shmem_atomic_{t}_fetch_thread",
            "args": ["uint64", t, t, "int32", "int32", "int32"],
            "ret": t,
        }
        assert MORI_DEVICE_FUNCTIONS[f"atomic_{t}_nonfetch_thread"] == {
            "symbol": f"mori_shmem_atomic_{t}_nonfetch_thread",
            "args": ["uint64", t, "int32", "int32", "int32"],
            "ret": "int32",
        }
    assert MORI_DEVICE_FUNCTIONS["atomic_size_nonfetch_thread"]["args"] == [
        "uint64",
        "uint64",
        "uint64",
        "int32",
        "int32",
        "int32",
    ]
    assert MORI_DEVICE_FUNCTIONS["put_size_imm_nbi_thread"]["args"] == ["uint64", "uint64", "uint64", "int32", "int32"]
    assert (
        MORI_DEVICE_FUNCTIONS["quiet_thread_pe_qp"]["args"]
        == MORI_DEVICE_FUNCTIONS["fence_thread_pe_qp"]["args"]
        == ["int32", "int32"]
    )
    assert [
        MORI_DEVICE_FUNCTIONS[f"{t}_p"]["args"][1]
        for t in ("char", "short", "int", "long", "longlong", "uchar", "ushort", "uint", "ulong", "ulonglong")
    ] == ["int8", "int16", "int32", "int64", "int64", "uint8", "uint16", "uint32", "uint64", "uint64"]


def test_wrapper_source_dispatches_every_amo_type_or_traps() -> None:
    """The generic atomics switch on MORI's numbers as the table states them; every other number
    reaches the trap (the default of each switch), never a silent no-op."""
    src = codegen.render()
    assert {n: int(v) for n, v in re.findall(r"^constexpr int (AMO_\w+) = (\d+);", src, re.M)} == AMO_TYPES
    helpers = {
        name: body
        for name, body in re.findall(
            r"static __device__ __forceinline__ \w+ (mori_ir_amo_\w+)\(.*?\) \{\n(.*?)\n\}\n", src, re.S
        )
    }
    nonfetch = {"AMO_INC", "AMO_SET", "AMO_SIGNAL_SET", "AMO_ADD", "AMO_SIGNAL_ADD", "AMO_AND", "AMO_OR", "AMO_XOR"}
    fetch = {
        "AMO_FETCH",
        "AMO_FETCH_INC",
        "AMO_FETCH_ADD",
        "AMO_FETCH_AND",
        "AMO_FETCH_OR",
        "AMO_FETCH_XOR",
        "AMO_SWAP",
        "AMO_COMPARE_SWAP",
    }
    assert set(re.findall(r"case (AMO_\w+):", helpers["mori_ir_amo_nonfetch"])) == nonfetch
    assert set(re.findall(r"case (AMO_\w+):", helpers["mori_ir_amo_fetch"])) == fetch
    for name in ("mori_ir_amo_nonfetch", "mori_ir_amo_fetch"):
        assert "default: mori_ir_bad_amo(amo_type" in helpers[name]
    assert re.search(
        r"mori_ir_bad_amo\(int amo_type, const char\* form\) \{\n  printf\(.*?\);\n  __trap\(\);", src, re.S
    )


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
            proc = subprocess.run(
                [name, "--defined-only", "--extern-only", path], capture_output=True, text=True, timeout=60
            )
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
    compiled = triton.compile(
        ASTSource(kernel, sig, {}),
        target=GPUTarget("cuda", 90, 32),
        options={"extern_libs": tuple(get_extern_libs("sm_90").items())},
    )
    ptx = compiled.asm["ptx"]
    assert re.search(rf"\.visible \.global \.align 8 \.b8 {STATE_SYMBOL}\[\d+\];", ptx)
    assert "atom.add.release.sys.u64" in ptx  # SIGNAL_ADD: a release at system scope
    assert "atom.add.relaxed.sys.u64" in ptx  # fetch_add: relaxed at system scope
    assert ".extern .func mori_shmem_" not in ptx  # every call resolved from the bitcode
    assert not re.search(r"call(\.uni)?\s[^\n]*mori_shmem_", ptx)  # and inlined: no call a kernel can see
    assert len(compiled.asm["cubin"]) > 0


@pytest.mark.skipif(not _HAS_TRITON or _any_bitcode() is None, reason="needs triton and the sm_90 bitcode")
def test_triton_generic_atomics_fold_a_constant_amo_type() -> None:
    """A constant amo_type leaves its one atomic (the switch and the bad-amo_type report fold away);
    an amo_type known only at run time keeps the report-and-trap path."""
    import triton
    import triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from mori.ir.triton import get_extern_libs, mori_shmem_device as msd

    @triton.jit
    def constant_kernel(counter, word, olds, imm, src, peer):
        tl.store(olds, msd.atomic_uint64_fetch_thread(counter, 5, 0, 14, peer, 0))  # AMO_FETCH_ADD
        msd.atomic_uint32_nonfetch_thread(word, 3, 6, peer, 0)  # AMO_OR
        msd.put_size_imm_nbi_thread(imm, src, 2, peer, 0)

    @triton.jit
    def runtime_kernel(counter, olds, amo_type):
        tl.store(olds, msd.atomic_uint64_fetch_thread(counter, 5, 0, amo_type, 0, 0))

    options = {"extern_libs": tuple(get_extern_libs("sm_90").items())}
    target = GPUTarget("cuda", 90, 32)
    ptx = triton.compile(
        ASTSource(
            constant_kernel,
            {"counter": "*u64", "word": "*u32", "olds": "*u64", "imm": "*u8", "src": "*u8", "peer": "i32"},
            {},
        ),
        target=target,
        options=options,
    ).asm["ptx"]
    assert "atom.add.relaxed.sys.u64" in ptx
    assert re.search(r"\b(red|atom)\.or\.relaxed\.sys\.b32\s", ptx), "no 32-bit atomic or"
    assert re.search(r"\bst\.volatile(\.global)?\.[bu]16\s", ptx), "no single 2-byte store for size_imm"
    assert "mori_ir_bad_amo" not in ptx
    ptx = triton.compile(
        ASTSource(runtime_kernel, {"counter": "*u64", "olds": "*u64", "amo_type": "i32"}, {}),
        target=target,
        options=options,
    ).asm["ptx"]
    assert "mori_ir_bad_amo" in ptx and "trap;" in ptx


@pytest.mark.skipif(not _HAS_TRITON or _any_bitcode() is None, reason="needs triton and the sm_90 bitcode")
def test_triton_block_put_copies_16_bytes_per_access_in_registers() -> None:
    """The inlined block put moves 16-byte vectors kept in registers, as nvcc's put does: an aggregate
    uint4 copy left clang's unrolled registers on the stack (ld.local) and split each access in two,
    which made big Triton puts 2.5x slower than the CUDA C++ put."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from mori.ir.triton import get_extern_libs, mori_shmem_device as msd

    @triton.jit
    def put_kernel(dst, src, nbytes, pe):
        msd.putmem_nbi_block(dst, src, nbytes, pe, 0)

    sig = {"dst": "*u8", "src": "*u8", "nbytes": "i64", "pe": "i32"}
    ptx = triton.compile(
        ASTSource(put_kernel, sig, {}),
        target=GPUTarget("cuda", 90, 32),
        options={"num_warps": 8, "extern_libs": tuple(get_extern_libs("sm_90").items())},
    ).asm["ptx"]
    assert len(re.findall(r"\bld(\.global)?\.v4\.b32\s", ptx)) >= 4, "no 4-deep unrolled 16-byte loads"
    assert len(re.findall(r"\bst(\.global)?\.v4\.b32\s", ptx)) >= 4, "no 4-deep unrolled 16-byte stores"
    assert "ld.local" not in ptx, "the copy loop goes through local memory"


@pytest.mark.skipif(not _HAS_TRITON or _any_bitcode() is None, reason="needs triton and the sm_90 bitcode")
def test_triton_ring_allreduce_moves_16_bytes_per_access() -> None:
    """The Triton ring all-reduce's element loops use 16-byte accesses, as its CUDA C++ twin does,
    when Triton specializes n % 16 == 0 and 16-byte aligned pointers (as it does at launch): its
    stripes are whole 8-element units and it says so. With 2-byte accesses `mori bench ir` compared
    different kernels, not the bitcode path."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from mori.apps.bench.ir_kernels import ring_allreduce_kernel
    from mori.ir.triton import get_extern_libs

    sig = {
        "data": "*bf16",
        "work": "*bf16",
        "rs": "*bf16",
        "ag": "*bf16",
        "sig": "*i64",
        "ack": "*i64",
        "out": "*bf16",
        "epoch": "i32",
        "n": "i32",
        "npes_c": "constexpr",
        "BLOCK": "constexpr",
    }
    aligned = {(i,): [["tt.divisibility", 16]] for i in (0, 1, 2, 3, 4, 5, 6, 8)}
    ptx = triton.compile(
        ASTSource(ring_allreduce_kernel, sig, {"npes_c": 2, "BLOCK": 2048}, aligned),
        target=GPUTarget("cuda", 90, 32),
        options={"num_warps": 8, "extern_libs": tuple(get_extern_libs("sm_90").items())},
    ).asm["ptx"]
    for access in (r"ld\.global\.v4\.b32", r"ld\.volatile\.global\.v4\.b32", r"st\.global\.v4\.b32"):
        assert re.search(rf"\b{access}\s", ptx), f"no {access} in the ring's element loops"
    assert not re.search(r"\b(ld|st)(\.volatile)?\.global\.b16\s", ptx), "2-byte element accesses remain"


def test_selftest_ctypes_signatures_match_the_kernels_source() -> None:
    """mori.shmem.selftest declares each launcher of selftest_kernels.cu to ctypes by hand: every
    argument must have the C type's width and kind, or a GPU run reads garbage (no compiler checks
    a ctypes call). Checked here, without a GPU, against the extern "C" definitions."""
    import ctypes
    from pathlib import Path

    from mori.shmem import selftest

    src = (Path(__file__).resolve().parents[2] / "shmem" / "src" / "selftest_kernels.cu").read_text()
    defined = {name: params for name, params in re.findall(r"^int (mori_selftest_\w+)\(([^)]*)\)", src, re.M | re.S)}
    scalar = {"int": ctypes.c_int, "size_t": ctypes.c_size_t, "uint64_t": ctypes.c_uint64, "int64_t": ctypes.c_int64}
    assert set(defined) == set(selftest._SIGNATURES)
    for name, params in defined.items():
        want = [
            ctypes.c_void_p if "*" in p else scalar[p.split()[-2]]
            for p in (" ".join(x.split()) for x in params.split(","))
        ]
        assert selftest._SIGNATURES[name] == want, f"{name}: ctypes {selftest._SIGNATURES[name]}, C {want}"


# ------------------------------------------------------------------ GPU

_NO_CUDA = not _C.shmem.built_with_cuda()
_PES = [] if _NO_CUDA else gpu_pe_counts(_C.shmem.cuda_device_count())
GPU_ENV = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
    "MORI_SHMEM_GPU_HEAP_SIZE": "512M",
    "MORI_SHMEM_HEAP_SIZE": "256M",
    "MORI_BOOTSTRAP_TIMEOUT": "60",
}
CHECKS = (
    "query",
    "ptr_p2p",
    "put_signal",
    "fetch_add",
    "barrier",
    "allreduce",
    "ring_allreduce",
    "generic_amo",
    "size_imm",
)


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


@pytest.mark.gpu
@pytest.mark.skipif(_NO_CUDA, reason="MORI was built without CUDA")
@pytest.mark.skipif(not _HAS_TRITON, reason="triton is not installed")
@pytest.mark.skipif(not _PES, reason="needs 2 CUDA GPUs (or MORI_TEST_GPU_PES and one)")
def test_fetch_atomic_with_a_nonfetch_amo_type_fails_the_launch() -> None:
    proc = mori_run(2, python_program("ir_triton_suite.py", "bad_amo"), timeout=180, env=GPU_ENV)
    out = proc.stdout + proc.stderr
    assert out.count("TRAPPED PE") == 2, (
        f"amo_type AMO_ADD to a fetching atomic did not fail the launch:\n{out[-6000:]}"
    )


@pytest.mark.gpu
@pytest.mark.skipif(_NO_CUDA, reason="MORI was built without CUDA")
@pytest.mark.skipif(not _PES, reason="needs 2 CUDA GPUs (or MORI_TEST_GPU_PES and one)")
@pytest.mark.parametrize("pes", _PES or [2])
def test_cuda_cpp_allreduces_match_torch(pes: int) -> None:
    """The CUDA C++ twins of the Triton all-reduces (the baseline of `mori bench ir`) sum exactly
    as torch does, back to back, on several block counts (tests/programs/ir_cuda_allreduce.py)."""
    if pes > 8:
        pytest.skip("the CUDA C++ all-reduces are built for 2 to 8 PEs")
    out = check(mori_run(pes, python_program("ir_cuda_allreduce.py"), timeout=240, env=GPU_ENV))
    for name in ("oneshot", "ring"):
        assert out.count(f"PASS {name}") == pes, f"check {name} did not pass on {pes} PEs:\n{out[-6000:]}"
