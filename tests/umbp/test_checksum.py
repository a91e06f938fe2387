# SPDX-License-Identifier: MIT
"""The value checksum (umbp/src/checksum.h) as a property: for any size, the one-shot form, the
streaming form fed in pieces of any size, and the definition rebuilt here from the chunks'
digests agree; a flipped byte anywhere changes it. Known answers of the plain XXH3 part:
test_ssd_tier.py."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mori._C.umbp import streamed_value_checksum, value_checksum

CHUNK = 256 << 10
DATA = np.random.default_rng().integers(0, 256, 3 * CHUNK + 4096, dtype=np.uint8)  # fresh each run


def _tree(ptr: int, n: int) -> int:
    """The definition: XXH3-64 up to a chunk, else XXH3-64 of the chunks' digests and the size
    as little-endian 64-bit words (hashed by value_checksum as one small value)."""
    if n <= CHUNK:
        return value_checksum(ptr, n)
    words = np.array([value_checksum(ptr + off, min(CHUNK, n - off)) for off in range(0, n, CHUNK)] + [n], "<u8")
    return value_checksum(words.ctypes.data, words.nbytes)


sizes = st.one_of(
    st.integers(0, DATA.size),
    st.sampled_from([CHUNK - 1, CHUNK, CHUNK + 1, 2 * CHUNK, 2 * CHUNK + 1, 3 * CHUNK]),
)


@settings(max_examples=150, deadline=None)
@given(size=sizes, piece=st.integers(1, 2 * CHUNK + 3), start=st.integers(0, 4095))
def test_one_shot_streamed_and_defined_agree(size: int, piece: int, start: int) -> None:
    size = min(size, DATA.size - start)
    ptr = DATA.ctypes.data + start
    want = _tree(ptr, size)
    assert value_checksum(ptr, size) == want
    assert streamed_value_checksum(ptr, size, piece) == want


@settings(max_examples=60, deadline=None)
@given(size=st.integers(1, DATA.size), data=st.data())
def test_a_flipped_byte_changes_it(size: int, data) -> None:
    buf = DATA[:size].copy()
    before = value_checksum(buf.ctypes.data, size)
    at = data.draw(st.integers(0, size - 1))
    buf[at] ^= 1 << data.draw(st.integers(0, 7))
    assert value_checksum(buf.ctypes.data, size) != before
    assert streamed_value_checksum(buf.ctypes.data, size, 4096) != before


def test_bad_piece_is_refused() -> None:
    with pytest.raises(Exception, match="piece"):
        streamed_value_checksum(DATA.ctypes.data, 16, 0)
