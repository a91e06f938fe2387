# SPDX-License-Identifier: MIT
"""Compiles ``libmori_shmem_device_<arch>.bc`` with clang (CUDA, device only, LLVM bitcode).

    python ir/build.py --arch sm_90 --out DIR [--clang PATH] [--cuda-path PATH]

The build (ir/CMakeLists.txt) and :func:`mori.ir.find_bitcode` (on a cache miss) both run
this; it imports nothing from MORI. Needs a clang with the NVPTX target and a CUDA toolkit's
headers (libcu++ from CCCL for ``<cuda/atomic>``); libdevice is not needed.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

if __package__:
    from . import codegen
else:  # run as a script by the build, where an installed mori may be absent or another tree's
    import codegen  # type: ignore[no-redef]

_ARCH = re.compile(r"^sm_[0-9]{2,3}[af]?$")
# Newest first; a plain `clang` is tried first of all.
CLANG_NAMES = ("clang",) + tuple(f"clang-{v}" for v in range(22, 16, -1))
# Headers clang's CUDA wrapper includes that newer toolkits no longer ship (texture fetches
# went in CUDA 13; curand's header is absent when curand is not installed). Nothing here
# uses them, so empty stand-ins, searched after the toolkit's own, let the wrapper parse.
_ABSENT_HEADERS = ("texture_fetch_functions.h", "texture_indirect_functions.h", "curand_mtgp32_kernel.h")


class ToolchainMissing(RuntimeError):
    """No clang with NVPTX or no CUDA headers: the bitcode cannot be built here."""


def bitcode_name(arch: str) -> str:
    return f"libmori_shmem_device_{arch}.bc"


def check_arch(arch: str) -> str:
    if not isinstance(arch, str) or not _ARCH.match(arch):
        raise ValueError(f"arch must look like 'sm_90' (sm_ and the compute capability digits), got {arch!r}")
    return arch


def find_clang(explicit: str | None = None) -> str:
    """A clang that can target NVPTX: `explicit`, else MORI_IR_CLANG, else the newest on PATH.
    MORI_IR_CLANG is a row of core's env table; it is read from os.environ here because the build
    runs this file before (and without) the native module."""
    candidates = (
        [explicit]
        if explicit
        else ([os.environ["MORI_IR_CLANG"]] if os.environ.get("MORI_IR_CLANG") else list(CLANG_NAMES))
    )
    tried = []
    for name in candidates:
        path = shutil.which(name)
        if path is None:
            tried.append(f"{name} (not found)")
            continue
        targets = subprocess.run([path, "--print-targets"], capture_output=True, text=True, timeout=60).stdout
        if "nvptx64" in targets:
            return path
        tried.append(f"{path} (no NVPTX target)")
    raise ToolchainMissing(
        "no clang with the NVPTX target: tried "
        + ", ".join(tried)
        + " (install clang, e.g. apt-get install clang-19, or set MORI_IR_CLANG)"
    )


def find_cuda_path(explicit: str | None = None) -> str:
    """The CUDA toolkit root: `explicit`, else CUDA_HOME / CUDA_PATH, else nvcc's on PATH, else the
    toolkit's default install location."""
    roots = [explicit] if explicit else [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")]
    nvcc = shutil.which("nvcc")
    if not explicit and nvcc:
        roots.append(str(Path(nvcc).resolve().parent.parent))
    if not explicit:
        roots.append("/usr/local/cuda")
    for root in filter(None, roots):
        if (Path(root) / "include" / "cuda_runtime.h").exists():
            return root
    raise ToolchainMissing(
        "no CUDA toolkit headers: tried "
        + (", ".join(filter(None, roots)) or "nothing")
        + " (set CUDA_HOME to the toolkit root, or put its nvcc on PATH)"
    )


def _include_dir() -> Path:
    """shmem/include: next to the sources, or the installed copy inside the package."""
    here = Path(__file__).resolve().parent
    for cand in (here.parent / "shmem" / "include", here.parent / "include"):
        if (cand / "mori" / "shmem" / "device.cuh").exists():
            return cand
    raise ToolchainMissing(f"mori/shmem/device.cuh not found near {here} (a source checkout is needed to build)")


def build(arch: str, out_dir: str | os.PathLike, clang: str | None = None, cuda_path: str | None = None) -> Path:
    """Compiles the bitcode for `arch` into `out_dir`; returns its path. Atomic: the file appears whole."""
    check_arch(arch)
    clang_path, cuda = find_clang(clang), find_cuda_path(cuda_path)
    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="mori-ir-", dir=out) as tmp:
        shim = Path(tmp) / "absent"
        shim.mkdir()
        for h in _ABSENT_HEADERS:
            (shim / h).write_text("// empty: see mori/ir/build.py\n")
        src = Path(tmp) / "mori_shmem_device.cu"
        src.write_text(codegen.render())
        part = Path(tmp) / bitcode_name(arch)
        cmd = [
            clang_path,
            "-x",
            "cuda",
            "--cuda-device-only",
            f"--cuda-gpu-arch={arch}",
            f"--cuda-path={cuda}",
            "-nocudalib",
            "-Wno-unknown-cuda-version",
            # The module flag nvvm-reflect-ftz must equal Triton's (1 by default, enable_reflect_ftz)
            # or linking fails; the wrappers do no float math, so it changes nothing of ours.
            "-fcuda-flush-denormals-to-zero",
            "-std=c++17",
            "-O3",
            "-emit-llvm",
            "-c",
            "-isystem",
            str(Path(cuda) / "include" / "cccl"),
            "-idirafter",
            str(shim),
            "-I",
            str(_include_dir()),
            src.name,
            "-o",
            part.name,
        ]
        # Relative names, run in the temporary folder: the module's source_filename is the same
        # on every build, so the same sources give the same bitcode.
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tmp)
        if proc.returncode != 0:
            raise RuntimeError(
                f"clang failed building the MORI-IR bitcode for {arch}:\n{' '.join(cmd)}\n" + proc.stderr[-4000:]
            )
        final = out / bitcode_name(arch)
        os.replace(part, final)
    return final


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", action="append", required=True, help="e.g. sm_90 (repeatable)")
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--clang")
    ap.add_argument("--cuda-path")
    args = ap.parse_args(argv)
    try:
        for arch in args.arch:
            print(build(arch, args.out, args.clang, args.cuda_path))
    except ToolchainMissing as exc:
        print(f"mori-ir: {exc}", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
