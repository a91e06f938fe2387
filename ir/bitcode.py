# SPDX-License-Identifier: MIT
"""Where ``libmori_shmem_device_<arch>.bc`` is: found, or built once into a per-arch cache."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from mori.core.env import setting
from mori.core.errors import InvalidArgument, Unavailable


def cache_dir() -> Path:
    """MORI_IR_CACHE_DIR, else $XDG_CACHE_HOME/mori/ir, else ~/.cache/mori/ir."""
    explicit = setting("MORI_IR_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "mori" / "ir"


def installed_dir() -> Path | None:
    """The package's lib/ (where the build installs the precompiled bitcode), found without importing _C."""
    spec = importlib.util.find_spec("mori._C")
    if spec is None or spec.origin is None:
        return None
    return Path(spec.origin).resolve().parent / "lib"


def current_arch() -> str:
    """sm_XY of torch's current CUDA device."""
    try:
        import torch

        if torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability()
            return f"sm_{major}{minor}"
    except ImportError:
        pass
    raise InvalidArgument(
        "arch: no CUDA device visible to torch to take the architecture from; pass arch='sm_90' "
        "(or set MORI_IR_BITCODE to a bitcode file)"
    )


def _existing(path: str | os.PathLike, what: str) -> str:
    p = Path(path)
    if not p.is_file():
        raise InvalidArgument(f"{what}: {str(p)!r} is not a file (it should be a libmori_shmem_device_<arch>.bc)")
    return str(p.resolve())


def get_bitcode_path(arch: str | None = None) -> str:
    """The bitcode for `arch` (default: the current GPU's) if it exists already; never builds."""
    return find_bitcode(arch, build=False)


def find_bitcode(arch: str | None = None, path: str | os.PathLike | None = None, build: bool = True) -> str:
    """Path of the MORI-IR bitcode to link into a kernel.

    Looked for in order: `path`; the file MORI_IR_BITCODE names; the copy the build installed
    next to libmori for `arch` (default: torch's current GPU, e.g. ``sm_90``); the per-arch cache
    (:func:`cache_dir`). On a miss, with ``build=True``, it is compiled into the cache with clang
    (NVPTX) and the CUDA toolkit's headers. Raises Unavailable saying what was looked for and
    which tool is missing."""
    from mori.ir import build as _build  # late: `python -m mori.ir.build` imports this package first

    if path is not None:
        return _existing(path, "path")
    env = setting("MORI_IR_BITCODE")
    if env:
        return _existing(env, "MORI_IR_BITCODE")
    arch = arch if arch is not None else current_arch()
    try:
        _build.check_arch(arch)
    except ValueError as exc:
        raise InvalidArgument(str(exc)) from None
    name = _build.bitcode_name(arch)
    looked = []
    for folder in (installed_dir(), cache_dir()):
        if folder is None:
            continue
        candidate = folder / name
        if candidate.is_file():
            return str(candidate)
        looked.append(str(candidate))
    if not build:
        raise Unavailable(
            f"no MORI-IR bitcode for {arch}: looked at {', '.join(looked)}; call find_bitcode() "
            f"to build it, or set MORI_IR_BITCODE"
        )
    try:
        return str(_build.build(arch, cache_dir()))
    except _build.ToolchainMissing as exc:
        raise Unavailable(
            f"no MORI-IR bitcode for {arch} (looked at {', '.join(looked)}) and it cannot be built "
            f"here: {exc}. Build it where clang is installed (python -m mori.ir.build --arch {arch} "
            f"--out DIR) and set MORI_IR_BITCODE=DIR/{name}"
        ) from None
