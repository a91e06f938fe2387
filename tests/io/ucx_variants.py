# SPDX-License-Identifier: MIT
"""The RDMA backend on UCX as the io tests run it here: forced (MORI_IO_RDMA_TRANSPORT=ucx)
over UCX's tcp or shared-memory transports, since no machine here has an RDMA device.
Same-host direct copies are off, so pairs on one host go through UCX too."""

from __future__ import annotations

from typing import Optional

import pytest

# test parameter -> UCX_TLS
VARIANTS = {"ucx-tcp": "tcp", "ucx-sm": "sm"}


def unavailable() -> Optional[str]:
    """Why UCX cannot be used in this process (None when it can)."""
    from mori._C import io as _io

    report = _io.ucx_report()
    if not report["loaded"]:
        return f"UCX is not available: {report['why']}"
    return None


def env(variant: str) -> dict:
    """The environment of an engine process of this variant."""
    return {"MORI_IO_RDMA_TRANSPORT": "ucx", "UCX_TLS": VARIANTS[variant], "MORI_IO_DIRECT": "0"}


def use(monkeypatch, variant: str) -> None:
    """Sets the variant for engines made in this process (skips when UCX is absent)."""
    reason = unavailable()
    if reason:
        pytest.skip(reason)
    for k, v in env(variant).items():
        monkeypatch.setenv(k, v)


def matches(variant: str, backend: str) -> bool:
    """Whether engine.backend_for's text names this variant: "ucx (tcp/lo)" for ucx-tcp,
    "ucx (sysv/memory, ...)" (no tcp lane) for ucx-sm; otherwise the plain name."""
    if variant not in VARIANTS:
        return backend == variant
    if not backend.startswith("ucx (") or not backend.endswith(")"):
        return False
    lanes = [t.strip() for t in backend[5:-1].split(",") if t.strip()]
    tcp = [t.startswith("tcp/") for t in lanes]
    return bool(lanes) and (all(tcp) if variant == "ucx-tcp" else not any(tcp))
