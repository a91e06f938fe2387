# SPDX-License-Identifier: MIT
"""One JSON line per case from every PE of a rank program, so a failing test names its case.

    run_cases(me, [("rma", check_rma), ...])  ->  {"case": "rma", "pe": 0, "ok": true, "s": 0.41}

The first case that raises prints ``"ok": false`` with its error and ends this PE with exit
code 1 (the others, waiting for it in a barrier, are stopped by the launcher or time out):
cases run in lockstep on every PE, so none can go on past a failed one. tests/harness.py's
``check_cases`` reads the lines back.
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from typing import Callable, Sequence

CASE_KEY = "case"


def report(case: str, pe: int, ok: bool, seconds: float, error: str = "") -> None:
    line = {CASE_KEY: case, "pe": pe, "ok": ok, "s": round(seconds, 3)}
    if error:
        line["error"] = error
    print(json.dumps(line), flush=True)


def run_cases(pe: int, cases: Sequence[tuple[str, Callable[[], None]]]) -> None:
    """Runs each case in order and reports it; exits 1 after the first failure."""
    for name, fn in cases:
        t0 = time.monotonic()
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001 - any failure of a case is that case's
            report(name, pe, False, time.monotonic() - t0, f"{type(exc).__name__}: {exc}")
            sys.stderr.write(traceback.format_exc())
            sys.stderr.flush()
            sys.exit(1)
        report(name, pe, True, time.monotonic() - t0)
