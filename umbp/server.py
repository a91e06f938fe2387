# SPDX-License-Identifier: MIT
"""MORI-UMBP's per-host server: ``mori umbp-server`` or ``python -m mori.umbp.server``.

One server per host wraps one local store (DRAM + SSD tiers, configured by ``UMBP_*`` settings and
the options below) that every rank of the host shares in StandaloneProcess mode
(``UMBPStandaloneProcessConfig.address``, or ``UMBP_STANDALONE_ADDRESS``). Ranks hand their host KV
buffers over once (memfd); values never cross the socket. Only processes of the server's own user
may connect (socket mode 0600, SO_PEERCRED checked).

A second server started for an address that a live server holds exits at once with status 0
(this is how ranks racing to auto-start end with one server).
"""

from __future__ import annotations

import argparse
import signal
import sys
from dataclasses import dataclass
from typing import Optional, Sequence


@dataclass
class ServerOptions:
    """What ``mori umbp-server`` was asked for (None: the UMBP_* setting, else MORI's default)."""

    address: str = ""
    idle_exit_timeout_ms: int = -1
    dram_capacity: Optional[int] = None
    ssd_enabled: Optional[bool] = None
    ssd_dir: Optional[str] = None
    ssd_capacity: Optional[int] = None
    quiet: bool = False


def _size(text: str) -> int:
    from mori import _C

    return int(_C.core.parse_size(text))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The server's command-line options (shared by ``mori umbp-server`` and ``-m mori.umbp.server``)."""
    parser.add_argument(
        "--address",
        default="",
        help="unix:///path.sock to listen at (default: UMBP_STANDALONE_ADDRESS, else "
        "$XDG_RUNTIME_DIR/mori-umbp/<host>.sock or /tmp/mori-umbp-<uid>/<host>.sock)",
    )
    parser.add_argument(
        "--idle-exit-timeout-ms",
        type=int,
        default=-1,
        help="exit after this long without a connected worker (0: never; default UMBP_STANDALONE_IDLE_EXIT_TIMEOUT_MS)",
    )
    parser.add_argument("--dram-capacity", type=_size, default=None, help="DRAM tier bytes (e.g. 16GiB)")
    parser.add_argument("--ssd-dir", default=None, help="SSD tier directory")
    parser.add_argument("--ssd-capacity", type=_size, default=None, help="SSD tier bytes")
    parser.add_argument("--no-ssd", action="store_true", help="DRAM tier only")
    parser.add_argument("--quiet", action="store_true", help="do not print the listening line")


def options_from_args(args: argparse.Namespace) -> ServerOptions:
    """ServerOptions from parsed add_arguments() options."""
    return ServerOptions(
        address=args.address,
        idle_exit_timeout_ms=args.idle_exit_timeout_ms,
        dram_capacity=args.dram_capacity,
        ssd_enabled=False if args.no_ssd else None,
        ssd_dir=args.ssd_dir,
        ssd_capacity=args.ssd_capacity,
        quiet=args.quiet,
    )


def serve(opts: ServerOptions) -> int:
    """Run a per-host server until SIGTERM/SIGINT or the idle timeout; the process's exit status."""
    from mori import _C

    address = opts.address
    if not address:
        from mori.core.env import setting

        address = str(setting("UMBP_STANDALONE_ADDRESS")) or _C.umbp.default_server_address()
    server = _C.umbp.start_server(
        address,
        opts.idle_exit_timeout_ms,
        None,
        dram_capacity=opts.dram_capacity,
        ssd_enabled=opts.ssd_enabled,
        ssd_dir=opts.ssd_dir,
        ssd_capacity=opts.ssd_capacity,
    )
    if server is None:
        if not opts.quiet:
            print(f"mori umbp-server: {address} is already served by another process", flush=True)
        return 0
    stop = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.append(True))
    if not opts.quiet:
        print(f"mori umbp-server: listening at {server.address}", flush=True)
    # Short waits, so Python runs the signal handlers in between.
    while not server.wait(0.2):
        if stop:
            server.stop()
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of ``python -m mori.umbp.server``."""
    parser = argparse.ArgumentParser(prog="python -m mori.umbp.server", description=__doc__.splitlines()[0])
    add_arguments(parser)
    return serve(options_from_args(parser.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
