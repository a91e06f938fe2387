# SPDX-License-Identifier: MIT
"""The ucx transport on one host: MORI_NET_TRANSPORT=ucx-all routes every pair of
distinct PEs through UCX, over UCX's shared-memory (sm) and tcp transports. Also:
a PE dying under ucx, and the project without UCX."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from mori.core.ports import free_port

from harness import check, job_env, mori_run, python_program
from ucx_env import ucx_all, ucx_or_skip


@pytest.fixture(scope="module", autouse=True)
def ucx():
    return ucx_or_skip()


@pytest.mark.parametrize("tls", ["sm", "tcp"])
def test_shmem_suite_over_ucx(tls):
    out = check(mori_run(4, python_program("shmem_suite.py", "--quick"), timeout=150, env=ucx_all(tls)))
    assert "shmem suite passed on 4 PEs" in out


@pytest.mark.parametrize("tls", ["sm", "tcp"])
def test_operations_complete_while_the_target_computes(tls):
    # Emulated RMA needs the target's worker progressed: by the PE when it waits in the
    # library, by its progress thread when it computes, also right after a burst of calls.
    out = check(mori_run(2, python_program("busy_target.py", "ucx"), timeout=90, env=ucx_all(tls)))
    assert "busy target served: 40 rounds" in out


def test_a_served_wait_still_times_out():
    # A waiting PE polls ucx for as long as peers keep it busy, but only up to a bound:
    # its checks (here MORI_SHMEM_WAIT_TIMEOUT) must still run while PE 0 streams puts to it.
    env = dict(ucx_all("tcp"), MORI_SHMEM_WAIT_TIMEOUT="2")
    proc = mori_run(2, python_program("busy_waiter.py"), timeout=90, env=env)
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0, text
    m = re.search(r"busy waiter timed out after ([0-9.]+) s: .*MORI_SHMEM_WAIT_TIMEOUT", text)
    assert m and float(m.group(1)) < 8.0, text


def test_stress_chunked_transfers_over_ucx():
    out = check(mori_run(2, python_program("tcp_stress.py", "6", "ucx"), timeout=90, env=ucx_all("tcp")))
    assert "tcp stress passed: 6 rounds on 2 PEs" in out


@pytest.mark.parametrize("tls,device", [("tcp", "tcp/lo"), ("sm", "/memory")])
def test_info_reports_ucx_and_its_lanes(tls, device):
    cmd = [sys.executable, "-m", "mori.apps.cli", "info", "--json"]
    out = check(mori_run(3, cmd, timeout=60, env=ucx_all(tls), launcher_args=["--no-prefix"]))
    blobs = json.loads(out[out.index("["):out.rindex("]") + 1])
    for b in blobs:
        me = b["pe"]
        assert b["transports"] == ["shm" if pe == me else "ucx" for pe in range(3)], b
        for pe in range(3):
            if pe == me:
                continue
            ep = b["endpoints"][pe]
            assert ep.startswith("ucx ") and device in ep, ep
            # The endpoint's roles are UCX's own words: an am lane at least.
            assert re.search(r"\bam\b", ep), ep


def test_killed_pe_is_reported_over_ucx():
    """Ranks started straight from env vars (no launcher to stop the survivors): PE 2
    SIGKILLs itself mid-loop; PEs 0 and 1 fail fast with an error naming it."""
    n, port, secret = 3, free_port(), os.urandom(32).hex()
    procs = []
    for rank in range(n):
        env = job_env({**ucx_all("tcp"), "MORI_BOOTSTRAP_TIMEOUT": "30", "MASTER_ADDR": "127.0.0.1",
                       "MASTER_PORT": str(port), "RANK": str(rank), "WORLD_SIZE": str(n), "MORI_JOB_SECRET": secret})
        procs.append(subprocess.Popen(python_program("tcp_faults.py", "kill", "2"), env=env, text=True,
                                      stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=60)[0])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert procs[2].returncode == -9, outs[2]
    for rank in (0, 1):
        assert procs[rank].returncode == 3, outs[rank]
        m = re.search(r"caught (\w+) after ([\d.]+) s: (.*)", outs[rank])
        assert m, outs[rank]
        assert "PE 2" in m.group(3), f"the error does not name the dead PE: {m.group(0)}"
        assert float(m.group(2)) < 10, f"took {m.group(2)} s to notice"


def test_without_ucx_auto_is_tcp_and_ucx_fails_naming_why(tmp_path):
    missing = str(tmp_path / "no-libucp.so")
    # auto: between "hosts" (MORI_DISABLE_P2P: every peer is a network peer) it is tcp, as before.
    cmd = [sys.executable, "-m", "mori.apps.cli", "info", "--json"]
    out = check(mori_run(2, cmd, timeout=60, env={"MORI_DISABLE_P2P": "1", "MORI_UCX_LIBRARY": missing},
                         launcher_args=["--no-prefix"]))
    blobs = json.loads(out[out.index("["):out.rindex("]") + 1])
    assert [b["transports"] for b in blobs] == [["shm", "tcp"], ["tcp", "shm"]]
    # ucx insists: every PE fails, naming MORI_NET_TRANSPORT and the library it could not load.
    res = mori_run(2, python_program("shmem_suite.py", "--quick"), timeout=60,
                   env={"MORI_DISABLE_P2P": "1", "MORI_UCX_LIBRARY": missing, "MORI_NET_TRANSPORT": "ucx"})
    text = res.stdout + res.stderr
    assert res.returncode != 0, text
    assert "MORI_NET_TRANSPORT=ucx but UCX cannot be used" in text, text
    assert missing in text, text
    assert "shmem suite passed" not in text


def test_auto_without_rdma_is_tcp_here():
    """A UCX without an RDMA transport (tcp, sm only, as here): auto keeps tcp between hosts."""
    devices = subprocess.run(["ucx_info", "-d"], capture_output=True, text=True, timeout=60).stdout
    if re.search(r"Transport: (rc|dc|ud)", devices):
        pytest.skip("this machine's UCX has an RDMA transport")
    cmd = [sys.executable, "-m", "mori.apps.cli", "info", "--json"]
    out = check(mori_run(2, cmd, timeout=60, env={"MORI_DISABLE_P2P": "1"}, launcher_args=["--no-prefix"]))
    blobs = json.loads(out[out.index("["):out.rindex("]") + 1])
    assert [b["transports"] for b in blobs] == [["shm", "tcp"], ["tcp", "shm"]]


def test_bad_setting_is_named():
    res = mori_run(2, python_program("shmem_suite.py", "--quick"), timeout=60, env={"MORI_NET_TRANSPORT": "rdma"})
    text = res.stdout + res.stderr
    assert res.returncode != 0
    assert "MORI_NET_TRANSPORT=rdma: expected auto, tcp, ucx or ucx-all" in text, text


def test_helper_threads_are_named(tmp_path):
    # A profile (perf sched, top -H) must tell MORI's threads from the application's.
    prog = tmp_path / "names.py"
    prog.write_text(
        "import os\n"
        "import mori.shmem as sh\n"
        "sh.init()\n"
        "names = sorted({open(f'/proc/self/task/{t}/comm').read().strip() for t in os.listdir('/proc/self/task')})\n"
        "print(f'PE {sh.my_pe()} threads:', ' '.join(names), flush=True)\n"
        "sh.barrier_all()\n"
        "sh.finalize()\n")
    out = check(mori_run(2, [sys.executable, str(prog)], timeout=60, env=ucx_all("tcp")))
    for pe in range(2):
        line = next(ln for ln in out.splitlines() if f"PE {pe} threads:" in ln)
        names = line.split("threads:")[1].split()
        assert "mori-ucx" in names, line
        # Every other thread is the interpreter's own or UCX's async thread.
        assert all(n.startswith(("mori-", "python")) or n == "async" for n in names), line
