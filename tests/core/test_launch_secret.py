# SPDX-License-Identifier: MIT
"""Issue 29 item 11: the job secret of a MASTER_ADDR/RANK/WORLD_SIZE job without MORI_JOB_SECRET.

A secret derived from the store's address is one anyone who knows the address can compute, so it
is used on one host only (the store then listens on loopback); a job that may span hosts is
refused with an error saying how to set MORI_JOB_SECRET. Python (mori.core.bootstrap) and the C
API share one launcher detection (core/launch.h) and its policy (core/launch_secret.h).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from mori.core.ports import free_port

from harness import job_env

REMOTE = "198.51.100.7"  # TEST-NET-2: never an address of this host
LAUNCH = (
    "MASTER_ADDR",
    "MASTER_PORT",
    "MORI_MASTER_PORT",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "TORCHELASTIC_RUN_ID",
    "MORI_JOB_SECRET",
)
DETECT = (
    "import json; from mori.core.bootstrap import detect_launch; i = detect_launch(); "
    "print(json.dumps([i.kind, i.store_host, i.store_port, i.secret_hex]))"
)


def _env(**launch: str) -> dict:
    env = {
        k: v
        for k, v in job_env().items()
        if k not in LAUNCH and not k.startswith(("MORI_STORE", "OMPI_", "PMI", "MORI_RANK", "MORI_WORLD"))
    }
    env.update(launch)
    return env


def _detect(**launch: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", DETECT], env=_env(**launch), capture_output=True, text=True, timeout=60
    )


def _own_address() -> str:
    """A non-loopback address of this host, or skip."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect((REMOTE, 9))
        except OSError:
            pytest.skip("no route off this host")
        ip = s.getsockname()[0]
    if ip.startswith("127."):
        pytest.skip("this host has no non-loopback address")
    return ip


@pytest.mark.parametrize("torchrun", [False, True])
def test_remote_master_without_secret_is_refused(torchrun):
    """Before: a rank derived sha256(address, port) and went on; anyone could compute it."""
    extra = {"TORCHELASTIC_RUN_ID": "job7"} if torchrun else {}
    res = _detect(
        MASTER_ADDR=REMOTE, MASTER_PORT="29500", RANK="1", WORLD_SIZE="4", LOCAL_RANK="0", LOCAL_WORLD_SIZE="2", **extra
    )
    assert res.returncode != 0, res.stdout
    assert "MORI_JOB_SECRET is not set and this job may span hosts" in res.stderr, res.stderr
    assert f"MASTER_ADDR={REMOTE} is another host" in res.stderr, res.stderr
    assert "export MORI_JOB_SECRET=" in res.stderr, res.stderr


def test_remote_master_with_secret_takes_it_unchanged():
    secret = os.urandom(32).hex()
    res = _detect(MASTER_ADDR=REMOTE, MASTER_PORT="29500", RANK="1", WORLD_SIZE="4", MORI_JOB_SECRET=secret)
    assert res.returncode == 0, res.stderr
    assert "warning" not in res.stderr, res.stderr
    assert json.loads(res.stdout.splitlines()[-1]) == ["env", REMOTE, 29501, secret]


def test_own_address_spanning_hosts_is_refused():
    """The master's host of a multi-host job: MASTER_ADDR is its own address, but not every rank is local
    (or nothing says so)."""
    ip = _own_address()
    fewer = _detect(MASTER_ADDR=ip, MASTER_PORT="29500", RANK="0", WORLD_SIZE="4", LOCAL_WORLD_SIZE="2")
    assert fewer.returncode != 0 and "LOCAL_WORLD_SIZE=2 < WORLD_SIZE=4" in fewer.stderr, fewer.stderr
    unknown = _detect(MASTER_ADDR=ip, MASTER_PORT="29500", RANK="0", WORLD_SIZE="4")
    assert unknown.returncode != 0, unknown.stdout
    assert "is reachable from other hosts and LOCAL_WORLD_SIZE is not set" in unknown.stderr, unknown.stderr


def test_one_host_job_on_own_address_meets_on_loopback():
    """Zero-config on one host: MASTER_ADDR is this host's address and every rank is local, so the
    derived secret is used and the store moves to loopback, out of other hosts' reach. A real 2-PE job
    runs; while it runs, nothing listens on the public address at the store's port."""
    ip, port = _own_address(), free_port()
    res = _detect(MASTER_ADDR=ip, MORI_MASTER_PORT=str(port), RANK="0", WORLD_SIZE="2", LOCAL_WORLD_SIZE="2")
    assert res.returncode == 0, res.stderr
    kind, host, got_port, secret = json.loads(res.stdout.splitlines()[-1])
    assert (kind, host, got_port, len(secret)) == ("env", "127.0.0.1", port, 64)
    assert "MORI_JOB_SECRET is not set" in res.stderr, res.stderr

    program = (
        "import time\n"
        "import mori.shmem as sh\n"
        "sh.init()\n"
        "me, n = sh.my_pe(), sh.n_pes()\n"
        "if me == 0:\n"
        "    print('READY', flush=True); time.sleep(1.5)\n"
        "sh.barrier_all()\n"
        "print('pes', n, flush=True)\n"
        "sh.finalize()\n"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", program],
            env=_env(
                MASTER_ADDR=ip,
                MORI_MASTER_PORT=str(port),
                RANK=str(r),
                WORLD_SIZE="2",
                LOCAL_RANK=str(r),
                LOCAL_WORLD_SIZE="2",
                MORI_DISABLE_P2P="1",
            ),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            stdin=subprocess.DEVNULL,
        )
        for r in range(2)
    ]
    try:
        assert procs[0].stdout.readline().strip() == "READY"
        with socket.socket() as s:
            s.settimeout(5)
            assert s.connect_ex((ip, port)) != 0, "the store listens on the public address"
        outs = [p.communicate(timeout=60) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0 and "pes 2" in out, out + err


C_PROGRAM = r"""
#include <shmem.h>
#include <stdio.h>
int main(void) {
  shmem_init();
  printf("joined %d\n", shmem_n_pes());
  shmem_finalize();
  return 0;
}
"""


def test_c_api_refuses_remote_master_without_secret(tmp_path):
    """The C API: before, rank 1 derived the secret and tried the remote store until the bootstrap
    timeout; now it is refused at once with the same words as Python."""
    from mori.shmem.capi import paths

    src, exe = tmp_path / "secret.c", tmp_path / "secret"
    src.write_text(C_PROGRAM)
    cc = subprocess.run(
        [str(paths().bin_dir / "oshcc"), "-o", str(exe), str(src)], capture_output=True, text=True, timeout=120
    )
    assert cc.returncode == 0, cc.stderr
    start = time.monotonic()
    res = subprocess.run(
        [str(exe)],
        env=_env(MASTER_ADDR=REMOTE, MASTER_PORT="29500", RANK="1", WORLD_SIZE="2", MORI_BOOTSTRAP_TIMEOUT="30"),
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert res.returncode != 0 and "joined" not in res.stdout, res.stdout
    assert "MORI_JOB_SECRET is not set and this job may span hosts" in res.stderr, res.stderr
    assert time.monotonic() - start < 20
