# SPDX-License-Identifier: MIT
"""docs/benchmarks.md is a table of current figures linking dated runs: every file under
docs/results is named by some doc, and every relative link of the docs leads to a file."""

from __future__ import annotations

import re
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _docs() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


def test_every_result_file_is_named_by_a_doc():
    text = "\n".join(p.read_text() for p in _docs())
    results = DOCS / "results"
    unnamed = [
        str(f.relative_to(results))
        for f in sorted(results.rglob("*"))
        if f.is_file() and str(f.relative_to(results)) not in text
    ]
    assert not unnamed, f"files under docs/results that no doc names: {unnamed}"


def test_relative_links_lead_to_files():
    broken = []
    for doc in _docs():
        for target in re.findall(r"\]\(([^)\s]+)\)", doc.read_text()):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue
            if not (doc.parent / target.split("#")[0]).exists():
                broken.append(f"{doc.relative_to(DOCS)}: {target}")
    assert not broken, broken


def test_benchmarks_page_links_every_dated_run():
    page = (DOCS / "benchmarks.md").read_text()
    runs = [p for p in (DOCS / "results").rglob("*.md")]
    assert runs
    missing = [str(p.relative_to(DOCS)) for p in runs if f"]({p.relative_to(DOCS)})" not in page]
    assert not missing, f"dated runs not linked from docs/benchmarks.md: {missing}"
