# SPDX-License-Identifier: MIT
"""Generate the Python gRPC modules of UMBP's protos (run by CMake at build time).

    python generate.py OUT_DIR umbp.proto umbp_peer.proto ...

Runs grpc_tools.protoc with the build's Python, then makes the imports between the generated
modules package-relative (protoc writes ``import umbp_pb2``, which only works from the top level),
so they load as ``mori.umbp.proto.umbp_pb2``.
"""

from __future__ import annotations

import pathlib
import re
import sys


def _make_imports_relative(path: pathlib.Path, modules: list[str]) -> None:
    text = path.read_text()
    for module in modules:
        text = re.sub(rf"^import {module} as ", f"from . import {module} as ", text, flags=re.M)
    path.write_text(text)


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: generate.py OUT_DIR PROTO...", file=sys.stderr)
        return 2
    try:
        from grpc_tools import protoc
    except ImportError:
        print("generate.py: grpcio-tools is not installed (pip install grpcio-tools)", file=sys.stderr)
        return 3
    out_dir = pathlib.Path(argv[0])
    protos = [pathlib.Path(p).resolve() for p in argv[1:]]
    out_dir.mkdir(parents=True, exist_ok=True)
    include_dirs = sorted({str(p.parent) for p in protos})
    well_known = pathlib.Path(protoc.__file__).parent / "_proto"
    args = [
        "grpc_tools.protoc",
        *(f"-I{d}" for d in include_dirs),
        f"-I{well_known}",
        f"--python_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        *(str(p) for p in protos),
    ]
    rc = protoc.main(args)
    if rc != 0:
        return rc
    modules = [f"{p.stem}_pb2" for p in protos] + [f"{p.stem}_pb2_grpc" for p in protos]
    for module in modules:
        _make_imports_relative(out_dir / f"{module}.py", modules)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
