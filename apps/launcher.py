# SPDX-License-Identifier: MIT
"""``mori run``: start N local processes of one job (torchrun-style, one command per host).

The launcher hosts the job's bootstrap store, gives every process its rank in the
environment (MORI's variables plus torchrun's RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR/
MASTER_PORT, so torch programs run unchanged), prefixes each output line with the
rank, and when one process fails it stops the others and returns the worst exit code.

Ranks never outlive the launcher: SIGTERM, SIGHUP (a closed ssh session) and SIGINT stop
every rank's process group; a SIGKILLed launcher takes its ranks along through their
parent-death signal, and a small reaper process kills what the ranks started themselves
(their process groups) once the launcher is gone.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import IO, Callable, Optional, Sequence

from mori import _C
from mori.core.ports import restartable_port
from mori.core.env import setting


@dataclass
class LaunchConfig:
    """Arguments of ``mori run``."""

    nproc: int
    command: Sequence[str]
    nnodes: int = 1
    node_rank: int = 0
    master_addr: str = "127.0.0.1"
    master_port: int = 0  # 0: pick a free port (single node only)
    secret_hex: str = ""
    secret_file: str = ""  # --secret-file: a file holding the job secret (64 hex digits)
    socket_ifname: str = ""  # MORI_SOCKET_IFNAME for the processes (interface the hosts share)
    prefix_output: bool = True
    kill_grace_s: float = 3.0
    # After a rank fails, the others get this long to fail on their own before they are stopped:
    # a rank that sees the loss itself says which PE it lost, while one stopped at once leaves
    # the survivors on other hosts blaming it instead (issue 29 item 10).
    stop_notice_s: float = 0.5
    extra_env: dict = field(default_factory=dict)


def _pump(stream: IO[bytes], sink: IO[str], prefix: str, lock: threading.Lock) -> None:
    for raw in iter(stream.readline, b""):
        line = raw.decode(errors="replace")
        try:
            with lock:
                sink.write(prefix + line if prefix else line)
                if not line.endswith("\n"):
                    sink.write("\n")
                sink.flush()
        except (OSError, ValueError):
            pass  # our terminal is gone (SIGHUP): keep draining so no rank blocks on a full pipe
    stream.close()


_PR_SET_PDEATHSIG = 1


def _die_with_launcher():
    """A preexec function: the rank gets SIGKILL when the launcher dies, however it dies.

    Resolved before any fork; in the child it only makes two system calls (no locks taken),
    which is what makes a preexec function safe while the output pumps run."""
    prctl = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True).prctl
    launcher = os.getpid()

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != launcher:  # the launcher died before prctl took effect
            os._exit(128 + signal.SIGKILL)

    return preexec


# The reaper reads one process-group id per line from the launcher; at end of input without
# "done" (the launcher died) it stops those groups: what a rank forked has no parent-death signal.
_REAPER = """
import os, signal, sys, time
groups, done = [], False
for line in sys.stdin:
    if line.strip() == "done":
        done = True
        break
    groups.append(int(line))
if not done:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for g in groups:
            try:
                os.killpg(g, sig)
            except OSError:
                pass
        if sig == signal.SIGTERM:
            time.sleep(float(sys.argv[1]))
"""


class _Reaper:
    """Kills the ranks' process groups if the launcher dies without saying it is done."""

    def __init__(self, grace: float) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, "-c", _REAPER, str(grace)],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            start_new_session=True,
            text=True,
        )

    def add(self, pgid: int) -> None:
        self._proc.stdin.write(f"{pgid}\n")
        self._proc.stdin.flush()

    def done(self) -> None:
        try:
            self._proc.stdin.write("done\n")
            self._proc.stdin.close()
        except OSError:
            pass
        self._proc.wait()


class _Stopped(Exception):
    """The launcher received a stop signal (SIGTERM, SIGHUP)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _exit_code(rc: int) -> int:
    return 128 - rc if rc < 0 else rc  # killed by signal N -> 128+N, like a shell


def _read_secret_file(path: str) -> str:
    """The job secret in ``path`` (64 hex digits; surrounding whitespace ignored)."""
    try:
        with open(path) as f:
            text = f.read().strip()
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise ValueError(f"--secret-file {path}: {exc.strerror}") from exc
    if mode & 0o077:
        sys.stderr.write(
            f"mori run: warning: --secret-file {path} can be read by other users "
            f"(mode {mode & 0o777:03o}); chmod 600 it\n"
        )
    return _checked_secret(text, f"--secret-file {path}")


def _checked_secret(text: str, where: str) -> str:
    if len(text) != 64 or any(c not in "0123456789abcdefABCDEF" for c in text):
        raise ValueError(f"{where}: the job secret must be 64 hex digits (e.g. from `openssl rand -hex 32`)")
    return text


def _job_secret(cfg: LaunchConfig, multi_node: bool) -> str:
    """The secret every rank proves to the store and to each other: given (--secret-file, then
    MORI_JOB_SECRET), else random. Across hosts node 0 draws it and says how to pass it on."""
    if cfg.secret_hex:
        return _checked_secret(cfg.secret_hex, "secret_hex")
    if cfg.secret_file:
        return _read_secret_file(cfg.secret_file)
    if env_secret := str(setting("MORI_JOB_SECRET")):
        return _checked_secret(env_secret, "MORI_JOB_SECRET")
    if multi_node and cfg.node_rank != 0:
        raise ValueError(
            f"node {cfg.node_rank} needs the job secret of node 0: set MORI_JOB_SECRET or pass "
            "--secret-file FILE with the secret node 0 printed (or the one you gave it)"
        )
    secret = _C.core.random_secret_hex()
    if multi_node:
        sys.stderr.write(
            "mori run: no job secret given, so node 0 drew a random one. Start every other node with it:\n"
            f"  MORI_JOB_SECRET={secret} mori run --nnodes {cfg.nnodes} --node-rank K ...\n"
            "or put it in a file only you can read (chmod 600) and pass --secret-file FILE on every node.\n"
        )
    return secret


def launch(cfg: LaunchConfig) -> int:
    """Run the job's local processes; returns the worst exit code (0 if all succeeded)."""
    if cfg.nproc < 1:
        raise ValueError(f"-n/--nproc must be >= 1, got {cfg.nproc}")
    if not cfg.command:
        raise ValueError("no command given: mori run -n N [--] program [args...]")
    if cfg.nnodes < 1 or not 0 <= cfg.node_rank < cfg.nnodes:
        raise ValueError(f"--node-rank {cfg.node_rank} must be in [0, --nnodes {cfg.nnodes})")
    world = cfg.nproc * cfg.nnodes
    multi_node = cfg.nnodes > 1
    if multi_node and not cfg.master_port:
        raise ValueError("--master-port is required with --nnodes > 1")
    secret = _job_secret(cfg, multi_node)

    server = None
    if cfg.node_rank == 0:
        # One host: the store is for local ranks only, so it stays off the network.
        server = _C.core.StoreServer(secret, "0.0.0.0" if multi_node else "127.0.0.1", cfg.master_port)
        store_port = server.port
    else:
        store_port = cfg.master_port
    store_host = cfg.master_addr if multi_node else "127.0.0.1"
    # torch's store (the program's rank 0) binds it after the other ranks start dialling it:
    # below the ephemeral range no outgoing connection can hold it meanwhile (mori.core.ports).
    torch_port = restartable_port("") if not multi_node else cfg.master_port + 1

    procs: list[subprocess.Popen] = []
    pumps: list[threading.Thread] = []
    lock = threading.Lock()
    handles_term = threading.current_thread() is threading.main_thread()
    previous: dict[int, object] = {}
    if handles_term:
        # A terminated or hung-up launcher stops its ranks too instead of leaving them orphaned.
        for sig in (signal.SIGTERM, signal.SIGHUP):
            previous[sig] = signal.signal(sig, _raise_stopped)
    reaper = _Reaper(cfg.kill_grace_s)
    preexec = _die_with_launcher()
    try:
        for local_rank in range(cfg.nproc):
            rank = cfg.node_rank * cfg.nproc + local_rank
            env = dict(os.environ)
            env.update(cfg.extra_env)
            env.update(
                {
                    "MORI_STORE_ADDR": f"{store_host}:{store_port}",
                    "MORI_JOB_SECRET": secret,
                    "MORI_RANK": str(rank),
                    "MORI_WORLD_SIZE": str(world),
                    "MORI_LOCAL_RANK": str(local_rank),
                    "MORI_LOCAL_WORLD_SIZE": str(cfg.nproc),
                    "MORI_NNODES": str(cfg.nnodes),
                    "MORI_NODE_RANK": str(cfg.node_rank),
                    # torchrun-compatible names for programs that also use torch.distributed
                    "RANK": str(rank),
                    "WORLD_SIZE": str(world),
                    "LOCAL_RANK": str(local_rank),
                    "LOCAL_WORLD_SIZE": str(cfg.nproc),
                    "MASTER_ADDR": store_host,
                    "MASTER_PORT": str(torch_port),
                    "PYTHONUNBUFFERED": "1",
                }
            )
            if cfg.socket_ifname:
                env["MORI_SOCKET_IFNAME"] = cfg.socket_ifname
            proc = subprocess.Popen(
                list(cfg.command),
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                preexec_fn=preexec,
            )
            procs.append(proc)
            reaper.add(proc.pid)  # start_new_session: the rank leads its own process group
            prefix = f"[{rank}] " if cfg.prefix_output else ""
            for stream, sink in ((proc.stdout, sys.stdout), (proc.stderr, sys.stderr)):
                t = threading.Thread(target=_pump, args=(stream, sink, prefix, lock), daemon=True)
                t.start()
                pumps.append(t)
        # A rank that ends (even with status 0, even before it joined) is told to the store at
        # once: ranks waiting for its bootstrap keys fail naming it instead of timing out.
        on_exit = server.rank_exited if server is not None else None
        return _supervise(
            procs, cfg.kill_grace_s, first_rank=cfg.node_rank * cfg.nproc, on_exit=on_exit, notice=cfg.stop_notice_s
        )
    except KeyboardInterrupt:
        _terminate(procs, cfg.kill_grace_s)
        return 130
    except _Stopped as stop:
        _terminate(procs, cfg.kill_grace_s)
        return 128 + stop.signum
    finally:
        reaper.done()
        if handles_term:
            for sig, handler in previous.items():
                signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        for t in pumps:
            t.join(timeout=5)
        if server is not None:
            server.stop()


def _raise_stopped(signum, frame) -> None:
    raise _Stopped(signum)


def _supervise(
    procs: list[subprocess.Popen],
    grace: float,
    first_rank: int = 0,
    on_exit: Optional[Callable[[int, int], None]] = None,
    notice: float = 0.0,
) -> int:
    """Wait for every rank; on the first failure stop the rest, ``notice`` seconds later (those
    that end on their own meanwhile count as such). The result is the worst code of the ranks
    that ended on their own (ranks we stopped report 128+SIGTERM otherwise).
    ``procs[i]`` is global rank ``first_rank + i`` (this host's first rank), the name it is reported by.
    ``on_exit(rank, code)`` hears of every rank that ends on its own (the job's store, on its host)."""
    worst = 0
    stopped_by_us: set[int] = set()
    stop_at: Optional[float] = None
    running = set(range(len(procs)))
    while running:
        for i in sorted(running):
            rc = procs[i].poll()
            if rc is None:
                continue
            running.discard(i)
            code = _exit_code(rc)
            if on_exit is not None and i not in stopped_by_us:
                on_exit(first_rank + i, code)
            if i not in stopped_by_us:
                worst = max(worst, code)
            if code != 0 and running and stop_at is None:
                sys.stderr.write(f"mori run: rank {first_rank + i} exited with code {code}; stopping the other ranks\n")
                stop_at = time.monotonic() + notice
        if stop_at is not None and running and not stopped_by_us and time.monotonic() >= stop_at:
            stopped_by_us.update(running)
            _terminate([procs[j] for j in running], grace)
        time.sleep(0.02)
    return worst


def _terminate(procs: list[subprocess.Popen], grace: float) -> None:
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + grace
    for p in procs:
        try:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
