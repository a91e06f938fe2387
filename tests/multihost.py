# SPDX-License-Identifier: MIT
"""Run one job across pretend hosts (network namespaces joined by veth), one
``mori run --nnodes N --node-rank K`` per host, as a user would on real machines.

Every host gets its own MORI_NODE_ID (the namespaces share one kernel, so the boot
id would otherwise put them on one node) and the same MORI_JOB_SECRET.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Optional, Sequence

import pytest

from harness import check, job_env
from mori.apps.netns import Host, VethHosts, unavailable_reason

MASTER_PORT = 29600


def veth_hosts_or_skip() -> VethHosts:
    """Two fresh namespaces joined by veth; skips the test where they cannot be made."""
    reason = unavailable_reason()
    if reason:
        pytest.skip(f"multi-host tests need network namespaces: {reason}")
    return VethHosts().__enter__()


@dataclass
class HostResult:
    host: Host
    returncode: int
    stdout: str
    stderr: str

    @property
    def text(self) -> str:
        return self.stdout + self.stderr


class MultiHostJob:
    """``mori run`` started in every namespace; wait() collects each host's output."""

    def __init__(
        self,
        hosts: Sequence[Host],
        nproc: int,
        program: Sequence[str],
        secret_hex: str,
        env: Optional[dict] = None,
        launcher_args: Sequence[str] = (),
    ) -> None:
        self.hosts = list(hosts)
        self.procs: list[subprocess.Popen] = []
        self.outputs: list[list[bytes]] = []
        self.threads: list[threading.Thread] = []
        self.started = time.monotonic()
        for rank, host in enumerate(self.hosts):
            host_env = job_env(env)
            host_env.update({"MORI_NODE_ID": host.name, "MORI_JOB_SECRET": secret_hex})
            cmd = [
                sys.executable,
                "-m",
                "mori.apps.cli",
                "run",
                "--nnodes",
                str(len(self.hosts)),
                "--node-rank",
                str(rank),
                "--master-addr",
                self.hosts[0].ip,
                "--master-port",
                str(MASTER_PORT),
                "-n",
                str(nproc),
                *launcher_args,
                "--",
                *program,
            ]
            proc = host.popen(cmd, env=host_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            self.procs.append(proc)
            out: list[bytes] = [b"", b""]
            self.outputs.append(out)
            for i, stream in enumerate((proc.stdout, proc.stderr)):
                t = threading.Thread(target=self._drain, args=(stream, out, i), daemon=True)
                t.start()
                self.threads.append(t)

    @staticmethod
    def _drain(stream, out: list[bytes], i: int) -> None:
        out[i] = stream.read()

    def wait(self, timeout: float) -> list[HostResult]:
        """Waits for every host; a hang past ``timeout`` stops the launchers and fails the test."""
        deadline = self.started + timeout
        hung = False
        for p in self.procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                hung = True
                break
        if hung:
            self.stop()
        for t in self.threads:
            t.join(timeout=10)
        results = [
            HostResult(h, p.returncode, o[0].decode(errors="replace"), o[1].decode(errors="replace"))
            for h, p, o in zip(self.hosts, self.procs, self.outputs)
        ]
        if hung:
            dump = "\n".join(f"--- host {r.host.name} (rc {r.returncode})\n{r.text[-4000:]}" for r in results)
            raise AssertionError(f"multi-host job hung for {timeout} s\n{dump}")
        return results

    def stop(self) -> None:
        """SIGTERM the launchers (they stop their ranks), then SIGKILL what is left."""
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=8)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def run_on_hosts(
    hosts: Sequence[Host],
    nproc: int,
    program: Sequence[str],
    timeout: float = 120,
    env: Optional[dict] = None,
    secret_hex: Optional[str] = None,
) -> list[HostResult]:
    job = MultiHostJob(hosts, nproc, program, secret_hex or os.urandom(32).hex(), env)
    return job.wait(timeout)


def check_all(results: Sequence[HostResult]) -> str:
    """Asserts every host's launcher succeeded (see harness.check); returns all their output."""
    text = "\n".join(f"--- host {r.host.name} (rc {r.returncode})\n{r.text}" for r in results)
    for r in results:
        if r.returncode != 0:
            check(subprocess.CompletedProcess([], r.returncode, text[-8000:], ""))
    return text


def info_blobs(results: Sequence[HostResult]) -> list[dict]:
    """The per-PE JSON of `mori info --json` run by run_on_hosts (rank 0 on host 0 prints it for
    every PE; the launcher's "[rank] " prefixes are stripped)."""
    import json

    text = results[0].stdout
    body = "\n".join(line.split("] ", 1)[1] if line.startswith("[") else line for line in text.splitlines())
    return json.loads(body[body.index("[") : body.rindex("]") + 1])


def joined(results: Sequence[HostResult]) -> subprocess.CompletedProcess:
    """Every host's result as one process's (for harness.check_cases): the first failing host's
    exit code, each host's output under a header."""
    code = next((r.returncode for r in results if r.returncode != 0), 0)
    text = "\n".join(f"--- host {r.host.name} (rc {r.returncode})\n{r.text}" for r in results)
    return subprocess.CompletedProcess(["mori", "run", "--nnodes", str(len(results))], code, text, "")
