# SPDX-License-Identifier: MIT
"""MORI: a modular communication framework for HPC and LLM serving.

Layers, bottom to top (each a subpackage, imported on first use):

* ``mori.core``        bootstrap, topology, environment settings, errors
* ``mori.transports``  how PEs reach each other (shm, tcp, cuda)
* ``mori.shmem``       OpenSHMEM-style symmetric memory (MORI's API plus a Pythonic one)
* ``mori.collectives`` collectives (alias ``mori.ccl``)
* ``mori.ep``          MoE dispatch/combine (alias ``mori.ops``)
* ``mori.io``          point-to-point transfer engine
* ``mori.apps``        the ``mori`` command line, benchmarks, integrations
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_SUBMODULES = {"core", "transports", "shmem", "collectives", "ep", "io", "apps", "ccl", "ops", "cpp"}


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"mori.{name}")
    raise AttributeError(f"module 'mori' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(list(globals()) + list(_SUBMODULES))
