# SPDX-License-Identifier: MIT
"""The checksums a located read hashes as its bytes land (umbp/src/arrival_checksums.h), against
a model: values laid out in a buffer, told of in spans of any size, order and grouping (several
values in one span, bytes of none between them, spans missing or told twice). A value's checksum
is given only when every byte of it was told of exactly once, and then equals value_checksum of
its bytes; anything else is None (the located read hashes it from memory)."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mori._C.umbp import UMBPArrivalChecksums, value_checksum

CHUNK = 256 << 10
DATA = np.random.default_rng().integers(0, 256, 4 * CHUNK + 8192, dtype=np.uint8)  # fresh each run
BASE = DATA.ctypes.data


def arrival_checksums(ptrs: list[int], sizes: list[int], spans: list[tuple[int, int]]) -> list:
    """Spans told of in this order, on this thread; each value's checksum or None."""
    a = UMBPArrivalChecksums(ptrs, sizes)
    for p, n in spans:
        a.landed(p, n)
    return [a.checksum(i) for i in range(len(ptrs))]


def _layout(draw, count: int) -> list[tuple[int, int]]:
    """(offset, size) of `count` values in DATA, in address order, with gaps or none."""
    out, at = [], draw(st.integers(0, 64))
    for _ in range(count):
        room = DATA.size - at
        if room < 1:
            break
        size = draw(st.one_of(st.integers(1, min(room, 3 * CHUNK)), st.sampled_from([CHUNK - 1, CHUNK, CHUNK + 1])))
        size = min(size, room)
        out.append((at, size))
        at += size + draw(st.sampled_from([0, 0, 1, 100]))
    return out


def _cuts(draw, start: int, end: int) -> list[tuple[int, int]]:
    """[start, end) cut into spans, in order."""
    spans, at = [], start
    while at < end:
        n = min(end - at, draw(st.one_of(st.integers(1, 4096), st.integers(1, 2 * CHUNK))))
        spans.append((at, n))
        at += n
    return spans


def _model(values: list[tuple[int, int]], spans: list[tuple[int, int]]) -> list[bool]:
    """Per value: whether every byte of it was told of exactly once (the rule, written plainly:
    order does not matter, as parts that land ahead are hashed once the prefix reaches them)."""
    told = [np.zeros(size, np.int64) for _off, size in values]
    for at, n in spans:
        for v, (off, size) in enumerate(values):
            lo, hi = max(at, off), min(at + n, off + size)
            if lo < hi:
                told[v][lo - off : hi - off] += 1
    return [bool((t == 1).all()) for t in told]


def _check(values: list[tuple[int, int]], spans: list[tuple[int, int]]) -> list:
    got = arrival_checksums(
        [BASE + off for off, _ in values], [size for _, size in values], [(BASE + at, n) for at, n in spans]
    )
    for (off, size), whole, sum_ in zip(values, _model(values, spans), got):
        assert sum_ == (value_checksum(BASE + off, size) if whole else None), (off, size)
    return got


@settings(max_examples=120, deadline=None)
@given(data=st.data())
def test_in_order_spans_give_every_checksum(data) -> None:
    """One pass over the whole layout (as a merged extent arrives: values and the gaps between
    them in one stream), cut anywhere."""
    values = _layout(data.draw, data.draw(st.integers(1, 6)))
    start, end = values[0][0], values[-1][0] + values[-1][1]
    got = _check(values, _cuts(data.draw, start, end))
    assert None not in got


@settings(max_examples=120, deadline=None)
@given(data=st.data())
def test_values_interleaved_as_lanes_deliver_them(data) -> None:
    """Each value in order on its own, the values' spans interleaved in any way (lanes)."""
    values = _layout(data.draw, data.draw(st.integers(1, 6)))
    queues = [_cuts(data.draw, off, off + size) for off, size in values]
    spans = []
    while any(queues):
        q = data.draw(st.sampled_from([q for q in queues if q]))
        spans.append(q.pop(0))
    got = _check(values, spans)
    assert None not in got


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_shuffled_missing_or_repeated_spans(data) -> None:
    """Spans shuffled (parts landing ahead of the prefix), some dropped or told twice: a value
    the model says was not told of exactly once is None, the rest right."""
    values = _layout(data.draw, data.draw(st.integers(1, 4)))
    spans = [s for off, size in values for s in _cuts(data.draw, off, off + size)]
    spans = data.draw(st.permutations(spans))
    if spans and data.draw(st.booleans()):
        spans.pop(data.draw(st.integers(0, len(spans) - 1)))
    if spans and data.draw(st.booleans()):
        spans.append(spans[data.draw(st.integers(0, len(spans) - 1))])
    _check(values, spans)


def test_overlapping_destinations_are_not_observed() -> None:
    """Two values sharing bytes: which one a span belongs to is unknowable, so neither counts."""
    assert arrival_checksums([BASE, BASE + 500], [1000, 1000], [(BASE, 1500)]) == [None, None]


def test_a_value_told_of_whole_is_its_checksum() -> None:
    size = 2 * CHUNK + 17
    assert arrival_checksums([BASE], [size], [(BASE, size)]) == [value_checksum(BASE, size)]
    assert arrival_checksums([BASE], [size], [(BASE, size - 1)]) == [None]
    assert arrival_checksums([BASE], [size], [(BASE + 1, size - 1)]) == [None]
    # Two halves, the second first (a striped read's lanes): chunk 0 finished from memory.
    half = size // 2
    assert arrival_checksums([BASE], [size], [(BASE + half, size - half), (BASE, half)]) == [value_checksum(BASE, size)]
    assert arrival_checksums([BASE], [size], [(BASE + half, size - half), (BASE, half + 1)]) == [None]


def test_lanes_at_once() -> None:
    """Two threads tell of one value's halves at the same time (a striped read's lanes), each in
    pieces, many times over: every value comes out whole and right, whichever half runs ahead."""
    sizes = [CHUNK + (CHUNK >> 1), CHUNK + 4097, CHUNK - 3]  # 3.5 chunks and change: within DATA
    offs = [0, sizes[0], sizes[0] + sizes[1]]
    assert offs[-1] + sizes[-1] <= DATA.size
    want = [value_checksum(BASE + o, z) for o, z in zip(offs, sizes)]
    rng = np.random.default_rng()
    for _ in range(40):
        a = UMBPArrivalChecksums([BASE + o for o in offs], sizes)
        lanes: list[list[tuple[int, int]]] = [[], []]
        for o, z in zip(offs, sizes):
            half = int(rng.integers(1, z))
            for lane, (lo, hi) in enumerate(((o, o + half), (o + half, o + z))):
                at = lo
                while at < hi:
                    n = min(hi - at, int(rng.integers(1, 64 << 10)))
                    lanes[lane].append((BASE + at, n))
                    at += n
        threads = [threading.Thread(target=lambda spans=spans: [a.landed(p, n) for p, n in spans]) for spans in lanes]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert [a.checksum(i) for i in range(3)] == want


def test_lanes_at_once_in_tight_loops() -> None:
    """Three or four lanes tell of stripes of the same values at full speed (each lane's spans in
    one native call, no interpreter between them), so that one lane notes its part while another
    hashes the prefix, and the prefix's thread takes over parts noted during its hash: every
    value comes out whole and right, 200 times over."""
    sizes = [2 * CHUNK - 12345, CHUNK + 1, CHUNK - 7]
    offs = [0, sizes[0], sizes[0] + sizes[1]]
    assert offs[-1] + sizes[-1] <= DATA.size
    want = [value_checksum(BASE + o, z) for o, z in zip(offs, sizes)]
    rng = np.random.default_rng()
    for _ in range(200):
        lanes_n = int(rng.integers(3, 5))
        lanes: list[list[tuple[int, int]]] = [[] for _ in range(lanes_n)]
        for o, z in zip(offs, sizes):
            cuts = sorted({0, z, *(int(c) for c in rng.integers(1, z, lanes_n - 1))})
            for lane, (lo, hi) in enumerate(zip(cuts, cuts[1:])):
                at = o + lo
                while at < o + hi:
                    n = min(o + hi - at, int(rng.integers(1, 16 << 10)))
                    lanes[lane].append((BASE + at, n))
                    at += n
        a = UMBPArrivalChecksums([BASE + o for o in offs], sizes)
        threads = [threading.Thread(target=a.landed_spans, args=(spans,)) for spans in lanes]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert [a.checksum(i) for i in range(3)] == want


def test_mismatched_lengths_are_refused() -> None:
    with pytest.raises(ValueError, match="ptrs and sizes"):
        UMBPArrivalChecksums([BASE], [1, 2])
