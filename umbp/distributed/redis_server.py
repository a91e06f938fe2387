# SPDX-License-Identifier: MIT
"""A private redis-server (Debian's binary) on a free port in a tmp dir, for tests, benchmarks
and single-host trials of the Redis metadata store. It also listens on a unix socket in that dir
(mode 0700: only this user), for a master on the same host (``unix_uri``).

    python -m mori.umbp.distributed.redis_server [--cluster] [--unix]   # prints its URI, runs until ^C
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from mori.core.ports import restartable_port


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the process that started it dies, so a killed test
    or benchmark leaves no redis-server behind."""
    import ctypes

    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


class _Exited(RuntimeError):
    pass


class RedisServerProcess:
    """``RedisServerProcess()`` starts one; ``.uri`` (TCP) and ``.unix_uri`` (its unix socket);
    ``.stop()`` ends it and removes its dir."""

    def __init__(
        self, cluster: bool = False, timeout_s: float = 10.0, exe: str = "redis-server", port: int = 0
    ) -> None:
        path = shutil.which(exe)
        if path is None:
            raise FileNotFoundError(f"{exe} is not installed (apt-get install redis-server)")
        self.dir = tempfile.mkdtemp(prefix="umbp-redis-")  # 0700
        self.socket_path = os.path.join(self.dir, "redis.sock")
        self.cluster = cluster
        # A free port can be taken by someone else before redis binds it: try a few.
        for attempt in range(5 if port == 0 else 1):
            self.port = port or restartable_port()  # a test may stop it and start it again here
            args = [
                path,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--unixsocket",
                self.socket_path,
                "--unixsocketperm",
                "700",
                "--dir",
                self.dir,
                "--save",
                "",
                "--appendonly",
                "no",
                "--protected-mode",
                "no",
                "--daemonize",
                "no",
                "--loglevel",
                "warning",
            ]
            if cluster:
                args += [
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    os.path.join(self.dir, f"nodes-{self.port}.conf"),
                ]
            self.proc = subprocess.Popen(
                args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=_die_with_parent
            )
            try:
                self._wait_ready(timeout_s)
                return
            except _Exited:
                continue
            except BaseException:
                self.stop()
                raise
        self.stop()
        raise RuntimeError(f"redis-server could not bind {'port %d' % port if port else 'a free port'}")

    def _wait_ready(self, timeout_s: float) -> None:
        import redis

        deadline = time.monotonic() + timeout_s
        c = redis.Redis(port=self.port, socket_timeout=1)
        while True:
            if self.proc.poll() is not None:
                raise _Exited(f"redis-server exited with {self.proc.returncode} on port {self.port}")
            try:
                c.ping()
                break
            except (redis.exceptions.ConnectionError, redis.exceptions.BusyLoadingError):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"redis-server on port {self.port} not ready after {timeout_s}s")
                time.sleep(0.05)
        if self.cluster:  # a one-node cluster that owns every slot
            c.execute_command("CLUSTER", "ADDSLOTSRANGE", 0, 16383)
            while "cluster_state:ok" not in c.execute_command("CLUSTER", "INFO").decode():
                if time.monotonic() > deadline:
                    raise TimeoutError("redis cluster state did not become ok")
                time.sleep(0.05)
        c.close()

    @property
    def uri(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    @property
    def unix_uri(self) -> str:
        """The same server through its unix socket (redis-py's and the master's native path's form)."""
        return f"unix://{self.socket_path}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cluster", action="store_true", help="a one-node Redis Cluster")
    p.add_argument("--unix", action="store_true", help="print the unix socket's URI, not the TCP one")
    args = p.parse_args(argv)
    server = RedisServerProcess(cluster=args.cluster)
    print(server.unix_uri if args.unix else server.uri, flush=True)
    try:
        signal.sigwait({signal.SIGINT, signal.SIGTERM})
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    sys.exit(main())
