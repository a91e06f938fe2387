# SPDX-License-Identifier: MIT
"""The one writer of every benchmark's results: a rich table on stdout and a JSON file with the
machine, the command and every row."""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import socket
import sys
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from mori import _C


def machine_info() -> dict:
    info = {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
    }
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return info


def command_line() -> str:
    """How this process was started, without the install path: ``python -m module args`` for a
    module, else the script's file name and its arguments."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    head = f"python -m {spec.name}" if spec is not None and spec.name else os.path.basename(sys.argv[0])
    return " ".join([head, *sys.argv[1:]])


# Set by `mori run` for every job (and one is a secret): not part of how a run was configured.
_LAUNCHER_VARS = {
    "MORI_JOB_SECRET",
    "MORI_STORE_ADDR",
    "MORI_RANK",
    "MORI_WORLD_SIZE",
    "MORI_LOCAL_RANK",
    "MORI_LOCAL_WORLD_SIZE",
    "MORI_NNODES",
    "MORI_NODE_RANK",
    "MORI_MASTER_PORT",
}


def settings() -> dict:
    """The MORI_* settings this run was started with (the launcher's own variables left out)."""
    rows = _C.core.env_table()
    return {
        r["name"]: r["value"]
        for r in sorted(rows, key=lambda r: r["name"])
        if r["is_set"] and r["name"].startswith("MORI_") and r["name"] not in _LAUNCHER_VARS
    }


@dataclass
class Report:
    """Rows of one benchmark run; `show()` prints them, `save()` writes JSON."""

    name: str
    columns: Sequence[str]
    rows: list = field(default_factory=list)
    meta: dict = field(default_factory=dict)

    def add(self, **row: Any) -> None:
        self.rows.append(row)

    def show(self, title: Optional[str] = None) -> None:
        try:
            from rich.console import Console
            from rich.table import Table

            table = Table(title=title or self.name)
            for c in self.columns:
                table.add_column(c, justify="right")
            for r in self.rows:
                table.add_row(*(_fmt(r.get(c)) for c in self.columns))
            Console(width=200).print(table)
        except ImportError:  # plain text fallback
            print(title or self.name)
            print("  ".join(f"{c:>14}" for c in self.columns))
            for r in self.rows:
                print("  ".join(f"{_fmt(r.get(c)):>14}" for c in self.columns))

    def save(self, path: Optional[str], extra: Optional[dict] = None) -> str:
        """Write the JSON document to ``path`` (default ``bench-results/NAME.json``); ``extra``
        adds top-level keys (benchmarks whose documents had them before this layout keep them)."""
        path = path or f"bench-results/{self.name}.json"
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        doc = {
            "benchmark": self.name,
            "date": _dt.datetime.now().isoformat(timespec="seconds"),
            "command": command_line(),
            "settings": settings(),
            "machine": machine_info(),
            "meta": self.meta,
            "rows": self.rows,
            **(extra or {}),
        }
        with open(path, "w") as f:
            json.dump(doc, f, indent=1)
        return path


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 1000 else f"{v:,.0f}"
    return str(v)
