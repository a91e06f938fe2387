# SPDX-License-Identifier: MIT
"""The rows of the GPU-host A/B scripts' runs (before_after_builds.sh): before-N.json and
after-N.json in an output folder, each a benchmark's JSON with its "rows"."""

from __future__ import annotations

import json
from typing import Iterator

NAMES = ("before", "after")


def runs(out: str, count: int) -> Iterator[tuple[int, dict[str, list[dict]]]]:
    """(run, {"before": rows, "after": rows}) for runs 1..count; a run whose JSON is missing or
    unreadable (its benchmark failed) has no rows."""
    for i in range(1, count + 1):
        by: dict[str, list[dict]] = {}
        for name in NAMES:
            try:
                with open(f"{out}/{name}-{i}.json") as f:
                    by[name] = json.load(f)["rows"]
            except (OSError, ValueError, KeyError):
                by[name] = []
        yield i, by
