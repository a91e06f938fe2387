# SPDX-License-Identifier: MIT
"""What ``mori bench io`` asks of every transfer engine it measures (MORI-IO and the baselines).

A driver has two ends in two processes. The target end opens first and describes itself in a
JSON-able dict; the initiator end opens with that dict and answers with its own; after that the
initiator alone moves data. ``prepare`` returns a function doing one transfer of a batch (post,
then wait until it is complete), so every engine is timed by the same loop.
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence

import numpy as np

Transfer = Callable[[], None]


class Driver:
    """One engine under test. Subclasses set ``name`` and, for engines with several call styles,
    ``apis`` (MORI-IO: session and engine)."""

    name = "?"
    apis: Sequence[str] = ("-",)
    needs_target = True  # False: everything happens in the initiator's process (memcpy)

    def target_open(self, buf: np.ndarray, host: str) -> dict:
        """Make the target end over ``buf``; returns what the initiator needs."""
        return {}

    def target_accept(self, peer: dict) -> None:
        """The initiator's answer (e.g. its engine descriptor)."""

    def initiator_open(self, buf: np.ndarray, host: str, peer: dict) -> dict:
        """Make the initiator end over ``buf``, reaching the target described by ``peer``."""
        return {}

    def prepare(self, op: str, api: str, offsets: Sequence[int], size: int) -> Transfer:
        """One ``op`` ("write": local to remote, "read": remote to local) of ``len(offsets)``
        messages of ``size`` bytes at the same offsets on both sides, waited for."""
        raise NotImplementedError

    def release(self) -> None:
        """Undo the last ``prepare`` (transfer handles); called before the next one."""

    def backend(self) -> Optional[str]:
        """The path the engine reports for this pair of buffers, where it says."""
        return None

    def close(self) -> None:
        pass


def address(buf: np.ndarray) -> int:
    return int(buf.ctypes.data)
