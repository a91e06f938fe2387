# SPDX-License-Identifier: MIT
"""The master benchmark runs end to end (tiny), and the generated gRPC modules say what to
install when they are missing."""

from __future__ import annotations

import json

import pytest

from mori.umbp import proto


@pytest.mark.parametrize("absent,rpc", [(0.0, "get"), (0.5, "get"), (0.5, "lookup"), (0.0, "puts")])
def test_bench_umbp_master_smoke(tmp_path, absent, rpc):
    """Tiny, end to end; with --absent half of every call's 16 keys are ones no one put: exactly
    those miss (the bench checks it too), answered by the native path where it runs; --lookup
    asks BatchLookup instead of BatchRouteGet, --puts BatchRoutePut of fresh keys (all routed)."""
    from mori.apps.bench import main as bench_main

    out = tmp_path / "m.json"
    assert (
        bench_main(
            [
                "umbp",
                "--master",
                "--backends",
                "memory",
                "--clients",
                "1",
                "--seconds",
                "0.3",
                "--keys",
                "600",
                "--batch",
                "16",
                "--absent",
                str(absent),
                "--json",
                str(out),
            ]
            + ([f"--{rpc}"] if rpc != "get" else [])
        )
        == 0
    )
    doc = json.loads(out.read_text())
    rows = {r["backend"]: r for r in doc["rows"]}
    assert set(rows) == {"memory"}
    for r in rows.values():
        assert r["calls"] >= 1 and r["misses"] == r["calls"] * round(16 * absent)
        assert r["calls_per_s"] > 0 and r["p99_us"] >= r["p50_us"] > 0
    assert doc["meta"]["mori_published"]["calls_per_s"] == 17300
    assert doc["meta"]["rpc"] == {"get": "BatchRouteGet", "lookup": "BatchLookup", "puts": "BatchRoutePut"}[rpc]


def test_bench_umbp_master_over_redis_unix_sockets(tmp_path):
    """The Redis rows through the servers' unix sockets: one Redis and four shards, tiny."""
    import shutil

    from mori.apps.bench import main as bench_main

    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed (scripts/setup.sh installs it)")
    out = tmp_path / "m.json"
    argv = ["umbp", "--master", "--backends", "redis-unix,redis4-unix", "--clients", "1", "--seconds", "0.3"]
    assert bench_main(argv + ["--keys", "300", "--batch", "8", "--json", str(out)]) == 0
    rows = {r["backend"]: r for r in json.loads(out.read_text())["rows"]}
    assert set(rows) == {"redis-unix", "redis4-unix"}
    for r in rows.values():
        assert r["calls"] >= 1 and r["misses"] == 0 and r["calls_per_s"] > 0


@pytest.mark.parametrize(
    "bad", [["--seconds", "0"], ["--seconds", "-1"], ["--absent", "1.5"], ["--backends", "memory,redis5"]]
)
def test_bench_umbp_master_refuses_bad_rows(bad, capsys):
    """A row of no time (or a share out of range) is refused before any master starts, naming
    the argument: a 0-second row would time one call per client and give no CPU figure."""
    from mori.apps.bench import main as bench_main

    with pytest.raises(SystemExit) as err:
        bench_main(["umbp", "--master", "--backends", "memory"] + bad)
    assert err.value.code == 2
    assert bad[0] in capsys.readouterr().err


def test_missing_generated_module_names_what_to_install():
    with pytest.raises(ImportError, match="grpcio-tools"):
        proto.require("no_such_pb2")
    assert proto.require("umbp_pb2").DESCRIPTOR.package == "umbp"
    svc = proto.require("umbp_pb2").DESCRIPTOR.services_by_name["UMBPMaster"]
    assert len(svc.methods) == 15
    peer = proto.require("umbp_peer_pb2").DESCRIPTOR.services_by_name["UMBPPeer"]
    assert {m.name for m in peer.methods} >= {
        "GetPeerInfo",
        "AllocateSlot",
        "CommitSlot",
        "AbortSlot",
        "ResolveKey",
        "EvictKey",
        "BatchAllocateSlots",
        "BatchCommitSlots",
        "BatchAbortSlots",
        "BatchResolveKeys",
        "PrepareSsdRead",
        "ReleaseSsdLease",
    }


@pytest.mark.timeout(120)
@pytest.mark.parametrize("peer_server", ["cpp", "python"])
def test_mori_info_says_what_runs_in_cpp(peer_server):
    """`mori info` names the gRPC server and client a UMBP process here would run (following
    UMBP_PEER_SERVER) and which calls this build answers in C++."""
    import os
    import subprocess
    import sys

    from mori.umbp.distributed.grpc_servers import SERVER_NAMES, cpp_server

    env = dict(os.environ, UMBP_PEER_SERVER=peer_server)
    out = subprocess.run(
        [sys.executable, "-m", "mori.apps.cli", "info"], env=env, capture_output=True, text=True, timeout=90
    )
    assert out.returncode == 0, out.stderr
    lines = {line.split(":", 1)[0]: line.split(":", 1)[1].strip() for line in out.stdout.splitlines() if ":" in line}
    mod = cpp_server()
    kind = peer_server if mod is not None else "python"
    assert lines["UMBP worker gRPC"].startswith(f"peer server {SERVER_NAMES[kind]},")
    native = lines["UMBP calls the grpc++ servers answer in C++"]
    if mod is None or not mod.HAVE_NATIVE_ROUTES:
        assert native.startswith("none (")
    else:
        assert "BatchRoutePut" in native and "BatchAllocateSlots" in native
        assert ("and over Redis" in native) == bool(mod.HAVE_NATIVE_REDIS)
