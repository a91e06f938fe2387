# SPDX-License-Identifier: MIT
"""Sizes and counts on a benchmark's command line, and sizes in its tables.

Every ``--sizes``/``--batches``/``--max-buffer``-style option of ``mori bench`` goes through
``parse_size`` (itself the core's parser, the one ``MORI_SHMEM_HEAP_SIZE`` uses), so ``4K``,
``4KiB``, ``1.5M`` and ``2G`` mean the same everywhere. Errors start with the option and the
text given (``--sizes: '0' ...``) and are turned into argparse errors by the callers.
"""

from __future__ import annotations

import re
from typing import Callable

_COUNT = re.compile(r"\s*\d+\s*")


def parse_size(text: str, option: str = "--sizes") -> int:
    """``8``, ``4K``, ``360K``, ``4.5M``, ``1GiB`` (binary units) -> a positive whole number of bytes."""
    from mori.core import parse_size as core_parse_size

    try:
        n = core_parse_size(text)
    except ValueError:
        raise ValueError(f"{option}: {text!r} is not a size (e.g. 8, 4K, 360K, 4.5M, 1G)") from None
    if n <= 0 or (text.strip()[-1:].isdigit() and not _COUNT.fullmatch(text)):  # "1.5" is no whole byte count
        raise ValueError(f"{option}: {text!r} is not a positive whole number of bytes")
    return n


def parse_count(text: str, option: str) -> int:
    """A positive whole number, no unit (iterations, batch lengths)."""
    if not _COUNT.fullmatch(text) or int(text) < 1:
        raise ValueError(f"{option}: {text!r} is not a positive whole number")
    return int(text)


def parse_list(text: str, option: str, parse: Callable[[str, str], int] = parse_size) -> list[int]:
    """A comma-separated list of sizes (or, with ``parse=parse_count``, counts); empty items skipped."""
    return [parse(item, option) for item in text.split(",") if item.strip()]


def size_sweep(lo: int, hi: int, factor: int = 4) -> list[int]:
    """Sizes lo, lo*factor, ... up to hi (inclusive): the sweep every size-based benchmark uses."""
    out, s = [], lo
    while s <= hi:
        out.append(s)
        s *= factor
    return out


def human_size(n: int) -> str:
    """``4 KiB``, ``360 KiB``, ``4.5 MiB``: the largest binary unit that shows ``n`` exactly
    with at most one decimal, else bytes."""
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div and (n * 10) % div == 0:
            return f"{n / div:g} {unit}"
    return f"{n} B"


def size_type(option: str) -> Callable[[str], int]:
    """An argparse ``type=`` for a size option: ``--max-size 1G`` as well as ``--max-size 1073741824``."""
    import argparse

    def parse(text: str) -> int:
        try:
            return parse_size(text, option)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc).removeprefix(f"{option}: ")) from None  # argparse names it

    return parse
