# SPDX-License-Identifier: MIT
"""The layers of layers.txt hold: no C++ ``#include`` or Python import reaches a layer above, and
no ``#include`` reaches another layer's private headers (anything outside its ``include/``).

The build enforces the same for what it compiles (one library per layer, the layer's folder
private); this test also covers headers no build of this machine compiles (CUDA-only, UCX-only)
and Python, which no build checks.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CXX_SUFFIXES = {".h", ".hpp", ".cc", ".cpp", ".cu", ".cuh"}
INCLUDE = re.compile(r'^\s*#\s*include\s*(?:"([^"]+)"|<(mori[^>]*)>)', re.M)
# Modules of the top-level package that belong to a layer (MORI's alias names).
PYTHON_ALIASES = {"ccl": "collectives", "ops": "ep", "kernel_profiler": "ep", "cpp": "apps"}
# Submodules of the native module mori._C, by the layer that binds them.
NATIVE_SUBMODULES = {
    "core": "core",
    "ucx": "transports",
    "shmem": "shmem",
    "collectives": "collectives",
    "ep": "ep",
    "io": "io",
    "umbp": "umbp",
}


def read_layers(root: Path) -> list[str]:
    """The layer names of ``root/layers.txt``, bottom to top."""
    return [
        line.strip() for line in (root / "layers.txt").read_text().splitlines() if re.fullmatch(r"[a-z]+", line.strip())
    ]


@dataclass(frozen=True)
class Violation:
    path: str
    target: str
    why: str

    def __str__(self) -> str:
        return f"{self.path}: {self.target}: {self.why}"


def _layer_files(root: Path, layer: str, suffixes: set[str]):
    for path in sorted((root / layer).rglob("*")):
        if path.suffix in suffixes and path.is_file():
            yield path


def check_includes(root: Path, layers: list[str]) -> list[Violation]:
    """Every quoted (or <mori...>) include of every layer's C++, resolved as the build does."""
    rank = {name: i for i, name in enumerate(layers)}
    found: list[Violation] = []
    for layer in layers:
        for path in _layer_files(root, layer, CXX_SUFFIXES):
            rel = path.relative_to(root).as_posix()
            public = rel.startswith(f"{layer}/include/")
            for match in INCLUDE.finditer(path.read_text(errors="replace")):
                target = match.group(1) or match.group(2)
                owner = None  # (layer, is public)
                parts = target.split("/")
                if (
                    len(parts) > 2
                    and parts[0] == "mori"
                    and parts[1] in rank
                    and (root / parts[1] / "include" / target).is_file()
                ):
                    owner = (parts[1], True)
                elif (root / layer / "include" / target).is_file():
                    owner = (layer, True)
                elif (path.parent / target).is_file() or (root / layer / target).is_file():
                    owner = (layer, False)
                if owner is None:
                    # Not found where the build looks: name whose private header it is, if any.
                    for other in layers:
                        if parts[0] == other and (root / target).is_file():
                            found.append(Violation(rel, target, f"a private header of layer {other}"))
                            break
                    else:
                        if (root / target).is_file() or parts[0] == "mori":
                            found.append(Violation(rel, target, "not a header of this layer nor a public one below"))
                    continue
                other, is_public = owner
                if rank[other] > rank[layer]:
                    found.append(Violation(rel, target, f"layer {other} is above {layer}"))
                elif public and not is_public:
                    found.append(Violation(rel, target, "a public header includes a private one"))
    return found


def _python_layer(module: str, layers: list[str]) -> str | None:
    """The layer a ``mori.*`` module belongs to, or None (the package itself, not a layer)."""
    parts = module.split(".")
    if parts[0] != "mori" or len(parts) < 2:
        return None
    if parts[1] in layers:
        return parts[1]
    if parts[1] in PYTHON_ALIASES:
        return PYTHON_ALIASES[parts[1]]
    if parts[1] == "_C" and len(parts) > 2:
        return NATIVE_SUBMODULES.get(parts[2])
    return None


def check_imports(root: Path, layers: list[str]) -> list[Violation]:
    """Every import of every layer's Python, lazy ones inside functions included."""
    rank = {name: i for i, name in enumerate(layers)}
    found: list[Violation] = []
    for layer in layers:
        for path in _layer_files(root, layer, {".py"}):
            rel = path.relative_to(root)
            package = ["mori", *rel.parent.parts]  # the package the file is in (mori.<layer>...)
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                modules: list[str] = []
                if isinstance(node, ast.Import):
                    modules = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom):
                    base = node.module or ""
                    if node.level:
                        anchor = package[: len(package) - node.level + 1]
                        base = ".".join(anchor + ([base] if base else []))
                    # `from mori import shmem` / `from mori._C import io`: the names may be modules.
                    modules = [base] if _python_layer(base, layers) else [f"{base}.{a.name}" for a in node.names]
                for module in modules:
                    other = _python_layer(module, layers)
                    if other is not None and rank[other] > rank[layer]:
                        found.append(Violation(rel.as_posix(), module, f"layer {other} is above {layer}"))
    return found


def test_layers_file_lists_every_layer_folder() -> None:
    layers = read_layers(ROOT)
    assert len(layers) == len(set(layers)), layers
    for name in layers:
        assert (ROOT / name / "CMakeLists.txt").is_file(), f"layer {name} has no CMakeLists.txt"
    # Every folder the build includes is a layer.
    folders = {p.parent.name for p in ROOT.glob("*/CMakeLists.txt")}
    assert folders == set(layers), sorted(folders ^ set(layers))
    assert "layers.txt" in (ROOT / "CMakeLists.txt").read_text()


def test_no_include_goes_up_or_into_private_headers() -> None:
    violations = check_includes(ROOT, read_layers(ROOT))
    assert not violations, "\n".join(map(str, violations))


def test_no_python_import_goes_up() -> None:
    violations = check_imports(ROOT, read_layers(ROOT))
    assert not violations, "\n".join(map(str, violations))


def _tree(root: Path, files: dict[str, str]) -> None:
    (root / "layers.txt").write_text("# bottom to top\nlow\nmid\nhigh\n")
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def test_checker_finds_what_it_must(tmp_path: Path) -> None:
    """The checks above can fail: a tree with one of each wrong include and import."""
    _tree(
        tmp_path,
        {
            "low/include/mori/low/api.h": '#include "mori/mid/api.h"\n#include "src/secret.h"\n',
            "low/src/secret.h": "",
            "low/src/impl.cc": '#include "src/secret.h"\n#include "mori/low/api.h"\n#include "impl_local.h"\n',
            "low/src/impl_local.h": "",
            "mid/include/mori/mid/api.h": '#include "mori/low/api.h"\n',
            "mid/src/uses.cc": '#include "low/src/secret.h"\n#include "mori/high/api.h"\n#include <mori/mid/api.h>\n',
            "high/include/mori/high/api.h": '#include "mori/mid/api.h"\n',
            "low/__init__.py": "from mori.mid import x\nimport mori.core\n",
            "mid/mod.py": "def f():\n    from mori import high\n    from mori.low import y\n    from . import sibling\n",
            "mid/sub/deep.py": "from ...high import z\n",
            "high/top.py": "import mori.low\nfrom mori.mid.mod import f\n",
        },
    )
    layers = read_layers(tmp_path)
    assert layers == ["low", "mid", "high"]
    includes = sorted((v.path, v.target) for v in check_includes(tmp_path, layers))
    assert includes == [
        ("low/include/mori/low/api.h", "mori/mid/api.h"),
        ("low/include/mori/low/api.h", "src/secret.h"),
        ("mid/src/uses.cc", "low/src/secret.h"),
        ("mid/src/uses.cc", "mori/high/api.h"),
    ]
    imports = sorted((v.path, v.target) for v in check_imports(tmp_path, layers))
    assert imports == [
        ("low/__init__.py", "mori.mid"),
        ("mid/mod.py", "mori.high"),
        ("mid/sub/deep.py", "mori.high"),
    ]


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(pytest.main([__file__, "-q"]))
