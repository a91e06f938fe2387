# SPDX-License-Identifier: MIT
"""Where MORI's OpenSHMEM C library lives, and the ``oshcc``/``oshc++``/``oshrun`` entry points.

``python -m mori.shmem.capi --cflags`` / ``--libs`` / ``--include-dir`` / ``--lib-dir`` /
``--bin-dir`` print what a build system needs; the console scripts ``oshcc``, ``oshc++``
and ``oshrun`` run the wrappers installed in ``mori/bin``.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class CapiPaths:
    """Installed locations of the C API (all inside the ``mori`` package directory)."""

    include_dir: Path
    lib_dir: Path
    bin_dir: Path

    @property
    def cflags(self) -> str:
        return f"-I{self.include_dir}"

    @property
    def libs(self) -> str:
        return f"-L{self.lib_dir} -Wl,-rpath,{self.lib_dir} -lmori_shmem"


def paths() -> CapiPaths:
    """Locate include/, lib/ and bin/ next to the native extension (works for wheels and editable installs)."""
    import importlib.util

    spec = importlib.util.find_spec("mori._C")
    if spec is None or spec.origin is None:
        raise RuntimeError("mori's native extension is not installed; run pip install .")
    root = Path(spec.origin).parent
    p = CapiPaths(root / "include", root / "lib", root / "bin")
    if not (p.lib_dir / "libmori_shmem.so").exists():
        raise RuntimeError(f"libmori_shmem.so is missing from {p.lib_dir}; rebuild mori")
    return p


def _exec(tool: str, child_env: dict[str, str] | None = None) -> None:
    """Replace this process by one of the C tools (with ``child_env`` as its environment if given)."""
    exe = paths().bin_dir / tool
    os.execve(str(exe), [str(exe), *sys.argv[1:]], os.environ if child_env is None else child_env)


def oshcc() -> None:
    """Console script: MORI's C compiler wrapper."""
    _exec("oshcc")


def oshcxx() -> None:
    """Console script: MORI's C++ compiler wrapper."""
    _exec("oshc++")


def oshrun() -> None:
    """Console script: launch an OpenSHMEM job (``oshrun -n N prog``) with ``mori run``."""
    # The shell script runs `mori run` with MORI_PYTHON: this Python (unless the user named one),
    # given to the script's environment only, not written into ours.
    _exec("oshrun", {"MORI_PYTHON": sys.executable, **os.environ})


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mori.shmem.capi", description=__doc__)
    for flag in ("cflags", "libs", "include-dir", "lib-dir", "bin-dir"):
        ap.add_argument(f"--{flag}", action="store_true")
    args = ap.parse_args(argv)
    p = paths()
    out = {
        "cflags": p.cflags,
        "libs": p.libs,
        "include_dir": str(p.include_dir),
        "lib_dir": str(p.lib_dir),
        "bin_dir": str(p.bin_dir),
    }
    chosen = [k for k in out if getattr(args, k)]
    for k in chosen or out:
        print(out[k] if chosen else f"{k}: {out[k]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
