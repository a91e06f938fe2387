# SPDX-License-Identifier: MIT
"""The network transports between hosts for real: two network namespaces joined by veth, one
`mori run --nnodes 2` per namespace, PEs that reach the other host only over that link, over
tcp and over ucx (MORI_NET_TRANSPORT=ucx, UCX_TLS=tcp); shm within a host.

Both transports: the conformance suite of test_conformance.py (one job, a JSON line per case),
the C API programs of tests/capi/, a PE killed mid-run and a link that goes down. tcp also:
a rate-limited link, a hostile client from the other host, an address the other host cannot
reach."""

from __future__ import annotations

import os
import random
import re
import time
from pathlib import Path

import pytest

from harness import check_cases, full_matrix, job_env, python_program
from multihost import MultiHostJob, check_all, joined, run_on_hosts, veth_hosts_or_skip
from ucx_env import ucx_or_skip

pytestmark = pytest.mark.netns

NET = {"tcp": {}, "ucx": {"MORI_NET_TRANSPORT": "ucx", "UCX_TLS": "tcp"}}
# What a pair of PEs on different hosts reports: the other host's address, never loopback; for
# ucx, UCX's tcp transport on the veth device, with an am lane at least, and RMA as MORI's
# requests over active messages (no rma lane: issue 29 item 2).
ENDPOINT = {
    "tcp": r"^(?!127\.)\d+\.\d+\.\d+\.\d+:\d+$",
    "ucx": r"^ucx tcp/[^l]\S*: .*\bam\b.* \(RMA as MORI requests over am",
}
CASES = ["matrix", "endpoint", "addresses", "threads", "rma", "atomics", "signal", "heap", "errors", "stress"]
C_PROGRAMS = ["rma", "amo", "sync", "coll", "legacy", "threads", "team_sync", "runahead"]
CAUGHT = re.compile(r"PE (\d+) caught (\w+) after ([\d.]+) s: (.*)")


@pytest.fixture(params=list(NET))
def net(request) -> str:
    if request.param == "ucx":
        ucx_or_skip()
    return request.param


@pytest.fixture
def veth():
    vh = veth_hosts_or_skip()
    try:
        yield vh
    finally:
        vh.destroy()


def _caught(text: str) -> dict[int, tuple[str, float, str]]:
    return {int(m.group(1)): (m.group(2), float(m.group(3)), m.group(4)) for m in CAUGHT.finditer(text)}


def test_conformance_two_hosts_two_pes_each(veth, net):
    ips = ",".join(h.ip for h in veth.hosts)
    program = python_program(
        "transport_conformance.py",
        "tcp" if net == "tcp" else "ucx",
        "--pes-per-host",
        "2",
        "--ips",
        ips,
        "--endpoint",
        ENDPOINT[net],
        "--stress",
        "4",
    )
    check_cases(joined(run_on_hosts(veth.hosts, 2, program, timeout=150, env=NET[net])), 4, CASES)


@pytest.fixture(scope="module")
def c_programs(capi_build) -> Path:
    return capi_build(C_PROGRAMS)


# Over ucx (outside the full matrix), the programs whose operations reach the transport
# differently (RMA, AMO, the collectives' puts, threads sharing a context, run-ahead signals);
# the others exercise the C API above it, as over tcp.
UCX_C_PROGRAMS = ["rma", "amo", "coll", "threads", "runahead"]


def test_c_programs_two_hosts(veth, net, c_programs):
    """The OpenSHMEM C API as 2 hosts x 2 PEs: heap and symmetric globals of the other host."""
    for name in C_PROGRAMS if net == "tcp" or full_matrix() else UCX_C_PROGRAMS:
        seed = str(random.getrandbits(48))
        out = check_all(run_on_hosts(veth.hosts, 2, [str(c_programs / name), seed], timeout=120, env=NET[net]))
        assert f"{name}: OK on 4 PEs" in out, f"{name} over {net}, seed {seed}:\n{out[-3000:]}"


def test_killed_pe_gives_others_an_error(veth, net):
    """PE 3 (host 1) SIGKILLs itself; PEs 0 and 1 (host 0) fail fast, naming a PE of host 1."""
    results = run_on_hosts(
        veth.hosts,
        2,
        python_program("tcp_faults.py", "kill", "3"),
        timeout=90,
        env={**NET[net], "MORI_BOOTSTRAP_TIMEOUT": "30"},
    )
    host0 = results[0]
    assert host0.returncode != 0, host0.text
    caught = _caught(host0.text)
    assert set(caught) & {0, 1}, f"no survivor on host 0 reported an error:\n{host0.text}"
    for pe, (kind, after, msg) in caught.items():
        if pe in (0, 1):
            assert re.search(r"PE [23]\b", msg), f"PE {pe}'s error does not name a PE of host 1: {msg}"
            assert after < 10, f"PE {pe} took {after} s to notice"
    # The first PE to go was 3; the message of at least one survivor says so.
    assert any("PE 3" in msg for pe, (_, _, msg) in caught.items() if pe in (0, 1)), host0.text


STREAM_DEATH_RUNS = (
    2  # per transport (MORI_TEST_STREAM_DEATH_RUNS overrides); the abort came in 3 of 4 where filed, 1 of 24 here
)


def test_pe_killed_mid_put_stream_never_aborts_a_survivor(veth, net):
    """Issue 29 item 2: every PE streams non-blocking 256 KiB puts at every other PE and PE 3
    (host 1) SIGKILLs itself in the middle. Over ucx a survivor aborted inside UCX 1.13's
    software put (SIGABRT in ucp_put_handler: 1 of 24 and 4 of 52 runs) until RMA to a peer
    without rma and amo lanes became MORI's requests over active messages (ucx_transport.h).
    Several runs (MORI_TEST_STREAM_DEATH_RUNS): in each, no rank ends by a signal of its own and
    both PEs of host 0 report an error naming PE 3. (PE 2 shares PE 3's launcher, which stops it
    once PE 3 died.)"""
    runs = int(os.environ.get("MORI_TEST_STREAM_DEATH_RUNS", STREAM_DEATH_RUNS))
    failed = []  # (run, what went wrong, the job's output), every run's
    for run in range(runs):
        results = run_on_hosts(
            veth.hosts,
            2,
            python_program("put_stream_death.py", "3"),
            timeout=90,
            env={**NET[net], "MORI_BOOTSTRAP_TIMEOUT": "30"},
        )
        text = "\n".join(f"--- host {r.host.name} (rc {r.returncode})\n{r.text}" for r in results)
        failed += [(run + 1, why, text) for why in _stream_death_problems(results, text)[:1]]
    if failed:
        aborts = sum("signal" in why for _, why, _ in failed)
        run, why, text = failed[0]
        pytest.fail(
            f"{len(failed)} of {runs} runs over {net} failed ({aborts} with a survivor ended by a signal); "
            f"run {run}: {why}:\n{text[-6000:]}"
        )


def _stream_death_problems(results, text: str) -> list[str]:
    """What is wrong with one run of put_stream_death.py: survivors ended by a signal, or a PE
    of host 0 that reported no error naming PE 3 within 20 s."""
    # The launcher reports a rank killed by signal N as code 128+N; only PE 3's SIGKILL (137) may appear.
    codes = {int(rank): int(code) for rank, code in re.findall(r"rank (\d+) exited with code (\d+)", text)}
    signalled = {rank: code for rank, code in codes.items() if code > 128 and rank != 3}
    if signalled or "Aborted" in text or "SIGABRT" in text:
        return [f"survivors ended by a signal {signalled or '(SIGABRT in the output)'}"]
    caught = _caught(results[0].text)
    if not {0, 1} <= set(caught):
        return ["a PE of host 0 reported no error"]
    problems = []
    for pe in (0, 1):
        kind, after, msg = caught[pe]
        if "PE 3" not in msg:
            problems.append(f"PE {pe}'s error does not name PE 3: {msg}")
        elif after >= 20:
            problems.append(f"PE {pe} took {after} s to notice")
    return problems


def test_host_link_down_becomes_an_error(veth, net, tmp_path):
    """Host 1's link goes down mid-run (no FIN, no RST): keepalive, timeouts and ucx's heartbeat
    turn the silence into errors on both hosts, naming the other, within about MORI_BOOTSTRAP_TIMEOUT."""
    timeout = 6
    progress = tmp_path / "progress"
    job = MultiHostJob(
        veth.hosts,
        1,
        python_program("tcp_faults.py", "loop", str(progress)),
        os.urandom(32).hex(),
        env={**NET[net], "MORI_BOOTSTRAP_TIMEOUT": str(timeout)},
    )
    deadline = time.monotonic() + 60
    while not progress.exists():
        assert time.monotonic() < deadline, "the job made no progress"
        assert all(p.poll() is None for p in job.procs), "the job ended before the link went down"
        time.sleep(0.05)
    veth.link_down(1)
    results = job.wait(60)
    for r, other in zip(results, (1, 0)):
        assert r.returncode != 0, r.text
        caught = _caught(r.text)
        assert caught, f"host {r.host.name} reported no error:\n{r.text}"
        for pe, (kind, after, msg) in caught.items():
            assert f"PE {other}" in msg, f"PE {pe}'s error does not name PE {other}: {msg}"
            assert after < 4 * timeout, f"PE {pe} took {after} s to notice"


def test_rate_limited_link_stays_correct_over_tcp(veth):
    """tbf-shaped link (200 Mbit/s both ways): chunked transfers up to 3 MiB, every byte checked."""
    veth.limit_rate("200mbit")
    out = check_all(run_on_hosts(veth.hosts, 1, python_program("tcp_stress.py", "8"), timeout=150))
    assert "tcp stress passed: 8 rounds on 2 PEs" in out


def test_hostile_client_from_another_host(veth, tmp_path):
    """A client in the other namespace: refused without the secret; with it, every
    out-of-bounds or malformed request is refused and the target keeps serving."""
    hosts = veth.hosts
    secret = os.urandom(32).hex()
    job = MultiHostJob(hosts, 1, python_program("tcp_guard_target.py", str(tmp_path)), secret)
    try:
        client = hosts[1].run(
            python_program("tcp_hostile_client.py", str(tmp_path), secret),
            timeout=120,
            env=job_env(),
            capture_output=True,
            text=True,
        )
    finally:
        results = job.wait(120)
    text = check_all(results)
    assert client.returncode == 0, client.stdout + client.stderr + text
    assert "target survived the hostile client" in text
    assert "could not prove it holds the job secret" in text and "are outside region 0" in text


def test_unreachable_address_is_a_clear_init_error(veth):
    """`--socket-ifname lo` makes every PE publish 127.0.0.1, which the other host cannot reach:
    init must fail within the timeout, naming the PE, its address and the setting to fix."""
    job = MultiHostJob(
        veth.hosts,
        1,
        python_program("shmem_suite.py", "--quick"),
        os.urandom(32).hex(),
        env={"MORI_BOOTSTRAP_TIMEOUT": "4"},
        launcher_args=["--socket-ifname", "lo"],
    )
    results = job.wait(60)
    text = "\n".join(r.text for r in results)
    assert all(r.returncode != 0 for r in results), text
    assert "cannot reach PE" in text and "127.0.0.1:" in text and "MORI_SOCKET_IFNAME" in text, text
