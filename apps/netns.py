# SPDX-License-Identifier: MIT
"""Pretend hosts on one machine: network namespaces joined by a veth pair.

Each namespace has its own loopback and one veth end with its own IPv4 address,
so processes in different namespaces can only talk over that link, as separate
hosts would. Used by the multi-host tests and by ``mori bench shmem --hosts 2``.
Needs root and iproute2 (``tc`` for rate limits).

    with VethHosts() as hosts:
        a, b = hosts.hosts
        a.popen(["python", "server.py"]); b.popen(["python", "client.py", a.ip])

Everything is removed on exit (also after errors); namespaces left behind by a
process that was killed are removed the next time, once their creator is gone.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from dataclasses import dataclass, field
from typing import Optional, Sequence

_PREFIX = "mori-"
_counter = 0
_counter_lock = threading.Lock()


def unavailable_reason() -> Optional[str]:
    """Why namespaces cannot be made here (None when they can)."""
    if os.geteuid() != 0:
        return "creating network namespaces needs root"
    if shutil.which("ip") is None:
        return "iproute2's `ip` command is not installed"
    return None


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, stdin=subprocess.DEVNULL)


def remove_stale() -> None:
    """Delete namespaces made by MORI processes that no longer exist."""
    listing = _ip("netns", "list", check=False).stdout
    for line in listing.splitlines():
        name = line.split()[0] if line.split() else ""
        if not name.startswith(_PREFIX):
            continue
        try:
            pid = int(name[len(_PREFIX) :].split("-")[0])
        except ValueError:
            continue
        if not os.path.exists(f"/proc/{pid}"):
            _ip("netns", "del", name, check=False)


@dataclass
class Host:
    """One namespace: its name, its veth end and address."""

    name: str
    ifname: str
    ip: str

    def command(self, cmd: Sequence[str]) -> list[str]:
        """``cmd`` prefixed so that it runs inside this namespace."""
        return ["ip", "netns", "exec", self.name, *map(str, cmd)]

    def popen(self, cmd: Sequence[str], env: Optional[dict] = None, **kwargs) -> subprocess.Popen:
        """Start ``cmd`` in this namespace (stdin closed)."""
        kwargs.setdefault("stdin", subprocess.DEVNULL)
        return subprocess.Popen(self.command(cmd), env=env, **kwargs)

    def run(self, cmd: Sequence[str], timeout: float = 60, **kwargs) -> subprocess.CompletedProcess:
        kwargs.setdefault("stdin", subprocess.DEVNULL)
        return subprocess.run(self.command(cmd), timeout=timeout, **kwargs)

    def set_link(self, up: bool) -> None:
        """Bring this host's end of its link up or down, as if its cable were plugged or pulled."""
        _ip("-n", self.name, "link", "set", self.ifname, "up" if up else "down")


def _claim_names() -> tuple[int, int, str]:
    """Check namespaces can be made, clear stale ones, and claim a fresh (pid, counter, tag) for
    this layout's names; the tag keeps interface names within Linux's 15 characters."""
    global _counter
    reason = unavailable_reason()
    if reason:
        raise PermissionError(reason)
    remove_stale()
    with _counter_lock:
        _counter += 1
        k = _counter
    pid = os.getpid()
    return pid, k, f"{pid % 10**7}{k % 100}"


def _bring_up(h: "Host") -> None:
    """Address ``h``'s interface inside its namespace and bring it and loopback up."""
    _ip("-n", h.name, "addr", "add", f"{h.ip}/24", "dev", h.ifname)
    _ip("-n", h.name, "link", "set", h.ifname, "up")
    _ip("-n", h.name, "link", "set", "lo", "up")


@dataclass
class VethHosts:
    """Two namespaces joined by one veth link (``subnet``.1 and ``subnet``.2/24)."""

    subnet: str = "10.203.0"
    hosts: list[Host] = field(default_factory=list)

    def __enter__(self) -> "VethHosts":
        self.create()
        return self

    def __exit__(self, *exc) -> None:
        self.destroy()

    def create(self) -> None:
        pid, k, tag = _claim_names()
        self.hosts = [Host(f"{_PREFIX}{pid}-{k}-{h}", f"mv{tag}{'ab'[h]}", f"{self.subnet}.{h + 1}") for h in range(2)]
        try:
            for h in self.hosts:
                _ip("netns", "add", h.name)
            a, b = self.hosts
            _ip("link", "add", a.ifname, "type", "veth", "peer", "name", b.ifname)
            for h in self.hosts:
                _ip("link", "set", h.ifname, "netns", h.name)
                _bring_up(h)
        except subprocess.CalledProcessError as exc:
            self.destroy()
            raise RuntimeError(
                f"could not create network namespaces: {' '.join(exc.cmd)}: {exc.stderr.strip()}"
            ) from exc

    def destroy(self) -> None:
        """Delete both namespaces (the veth pair goes with them). Safe to call twice."""
        for h in self.hosts:
            _ip("netns", "del", h.name, check=False)
        self.hosts = []

    def limit_rate(self, rate: str, burst: str = "64kb", latency: str = "50ms") -> None:
        """Shape both directions of the link with a token bucket (``tc qdisc ... tbf``)."""
        if shutil.which("tc") is None:
            raise RuntimeError("`tc` (iproute2) is not installed")
        for h in self.hosts:
            subprocess.run(
                h.command(
                    [
                        "tc",
                        "qdisc",
                        "replace",
                        "dev",
                        h.ifname,
                        "root",
                        "tbf",
                        "rate",
                        rate,
                        "burst",
                        burst,
                        "latency",
                        latency,
                    ]
                ),
                check=True,
                capture_output=True,
                text=True,
                stdin=subprocess.DEVNULL,
            )

    def link_down(self, host: int) -> None:
        """Take ``host``'s end of the link down, as if its cable were pulled."""
        self.hosts[host].set_link(False)


@dataclass
class BridgedHosts:
    """``count`` namespaces on one switch: each joined by its own veth pair to a bridge that
    lives in a namespace of its own (``subnet``.1 ... ``subnet``.count/24), for layouts of
    more than two hosts (a master on one, peers on others)."""

    count: int = 3
    subnet: str = "10.204.0"
    hosts: list[Host] = field(default_factory=list)
    switch: str = ""

    def __enter__(self) -> "BridgedHosts":
        self.create()
        return self

    def __exit__(self, *exc) -> None:
        self.destroy()

    def create(self) -> None:
        if not 2 <= self.count <= 9:
            raise ValueError(f"count must be 2..9, got {self.count}")
        pid, k, tag = _claim_names()
        self.switch = f"{_PREFIX}{pid}-{k}-sw"
        self.hosts = [
            Host(f"{_PREFIX}{pid}-{k}-{h}", f"mb{tag}{h}", f"{self.subnet}.{h + 1}") for h in range(self.count)
        ]
        try:
            _ip("netns", "add", self.switch)
            _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
            _ip("-n", self.switch, "link", "set", "br0", "up")
            for i, h in enumerate(self.hosts):
                port = f"mp{tag}{i}"
                _ip("netns", "add", h.name)
                _ip("link", "add", h.ifname, "type", "veth", "peer", "name", port)
                _ip("link", "set", h.ifname, "netns", h.name)
                _ip("link", "set", port, "netns", self.switch)
                _ip("-n", self.switch, "link", "set", port, "master", "br0")
                _ip("-n", self.switch, "link", "set", port, "up")
                _bring_up(h)
        except subprocess.CalledProcessError as exc:
            self.destroy()
            raise RuntimeError(
                f"could not create network namespaces: {' '.join(exc.cmd)}: {exc.stderr.strip()}"
            ) from exc

    def destroy(self) -> None:
        """Delete every namespace (the veth pairs and the bridge go with them). Safe to call twice."""
        for name in [h.name for h in self.hosts] + ([self.switch] if self.switch else []):
            _ip("netns", "del", name, check=False)
        self.hosts = []
        self.switch = ""
