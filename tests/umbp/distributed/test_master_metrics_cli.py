# SPDX-License-Identifier: MIT
"""The Prometheus endpoint (MORI's family names, peer-pushed samples re-exported) and the
``umbp_master`` / ``mori umbp-master`` command lines as real processes."""

from __future__ import annotations

import os
import socket
import signal
import subprocess
import sys
import urllib.request

import grpc
from umbp_master_harness import DRAM, GIB, SSD, PeerSession, pb, pb_grpc, running_master, uid

from mori.core.ports import free_port, wait_port
from mori.umbp import UMBPTierType
from mori.umbp.distributed import UMBPMasterClient


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        return r.read().decode()


def _value(text: str, sample: str) -> float:
    for line in text.splitlines():
        if line.startswith(sample + " "):
            return float(line.split()[-1])
    raise AssertionError(f"{sample} not in /metrics")


def test_metric_families():
    with running_master(metrics=True) as m:
        node = PeerSession(m.address, uid("n"), {DRAM: (1000, 250), SSD: (4000, 4000)})
        keys = [uid("k") for _ in range(3)]
        node.heartbeat([("add", k, DRAM, 10) for k in keys])
        node.heartbeat(seq=7)  # a gap
        stub = pb_grpc.UMBPMasterStub(grpc.insecure_channel(m.address))
        stub.BatchRouteGet(pb.BatchRouteGetRequest(keys=keys + [uid("miss")]), timeout=5)
        c = UMBPMasterClient(m.address)
        c.report_external_kv_blocks(node.node_id, ["h1", "h2"], UMBPTierType.DRAM)
        c.match_external_kv(["h1", "h3"])
        sample = pb.MetricSample(
            name="mori_umbp_ssd_read_total",
            help="SSD reads",
            labels=[pb.MetricLabel(name="status", value="ok")],
            counter_delta=5,
        )
        hist = pb.MetricSample(
            name="mori_umbp_client_batch_get_bandwidth_gibps",
            help="bw",
            histogram_aggregate=pb.HistogramAggregate(bounds=[1, 10], bucket_counts=[2, 3], count=4, sum=21.5),
        )
        for _ in range(2):
            stub.ReportMetrics(pb.ReportMetricsRequest(node_id=node.node_id, metrics=[sample, hist]), timeout=5)
        text = _scrape(m.metrics_port)
        n = node.node_id
        assert _value(text, f'mori_umbp_client_capacity_total_bytes{{node="{n}",tier="dram"}}') == 1000
        assert _value(text, f'mori_umbp_client_capacity_used_bytes{{node="{n}",tier="dram"}}') == 750
        assert _value(text, f'mori_umbp_client_capacity_utilization_ratio{{node="{n}",tier="dram"}}') == 0.75
        assert _value(text, f'mori_umbp_client_batch_route_get_total{{node="{n}"}}') == 3
        assert _value(text, "mori_umbp_route_get_miss_total") == 1
        assert _value(text, "mori_umbp_heartbeat_events_applied_total") == 3
        assert _value(text, "mori_umbp_heartbeat_seq_gap_total") == 1
        assert _value(text, "mori_umbp_external_kv_report_blocks_total") == 2
        assert _value(text, "mori_umbp_external_kv_match_queried_blocks_total") == 2
        assert _value(text, "mori_umbp_external_kv_match_matched_blocks_total") == 1
        assert _value(text, f'mori_umbp_ssd_read_total{{node="{n}",status="ok"}}') == 10
        assert _value(text, f'mori_umbp_client_batch_get_bandwidth_gibps_bucket{{le="10.0",node="{n}"}}') == 6
        assert _value(text, f'mori_umbp_client_batch_get_bandwidth_gibps_count{{node="{n}"}}') == 8
        assert _value(text, 'mori_umbp_master_rpc_latency_seconds_count{rpc="BatchRouteGet"}') == 1
        assert _value(text, "mori_umbp_client_count") == 1
        assert _value(text, f'mori_umbp_external_kv_live_count{{node="{n}"}}') == 2


def _serve_and_query(cmd: list[str], port: int, metrics_port: int) -> None:
    env = dict(os.environ, UMBP_ROUTE_PUT_NODE_AFFINITY="local")
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_port(port, timeout=20)
        node = uid("cli")
        c = UMBPMasterClient(f"127.0.0.1:{port}", node_id=node, node_address=node)
        c.register_self({UMBPTierType.DRAM: (GIB, GIB)})
        other = UMBPMasterClient(f"127.0.0.1:{port}", node_id=uid("other"))
        other.register_self({UMBPTierType.DRAM: (2 * GIB, 2 * GIB)})
        # UMBP_ROUTE_PUT_NODE_AFFINITY=local reached the process: puts stay on the writer
        assert [t[0] for t in c.batch_route_put([uid("k") for _ in range(3)], [1 << 20] * 3)] == [node] * 3
        wait_port(metrics_port)
        assert "mori_umbp_client_count 2.0" in _scrape(metrics_port)
    finally:
        proc.send_signal(signal.SIGINT)
        out = proc.communicate(timeout=10)[0]
    assert proc.returncode == 0, out
    assert f"listening on 127.0.0.1:{port}" in out


def test_umbp_master_console_script_and_mori_subcommand():
    # MORI's tests run the master as UMBP_MASTER_BIN address metrics_port: the installed script
    script = os.path.join(os.path.dirname(sys.executable), "umbp_master")
    cmd = (
        [script]
        if os.path.exists(script)
        else [sys.executable, "-c", "from mori.umbp.distributed.master_server import main; main()"]
    )
    port, mport = free_port(), free_port()
    _serve_and_query(cmd + [f"127.0.0.1:{port}", str(mport)], port, mport)
    port, mport = free_port(), free_port()
    _serve_and_query(
        [sys.executable, "-m", "mori.apps.cli", "umbp-master", f"127.0.0.1:{port}", str(mport)], port, mport
    )


def _free_port_pair() -> int:
    """A free port whose successor is free too: worker i serves its metrics on the given port + i
    (a successor taken by another test's process left worker 1 with nothing to listen on)."""
    while True:
        p = free_port()
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", p + 1))
            except OSError:
                continue
        return p


def test_worker_processes_share_the_port_over_redis():
    from mori.umbp.distributed.redis_server import RedisServerProcess

    redis = RedisServerProcess()
    port, mport = free_port(), _free_port_pair()
    while port in (mport, mport + 1):
        port = free_port()
    env = dict(os.environ, UMBP_METADATA_BACKEND="redis", UMBP_REDIS_URI=redis.uri, UMBP_REDIS_NAMESPACE=uid("w"))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mori.umbp.distributed.master_server",
            f"127.0.0.1:{port}",
            str(mport),
            "--workers",
            "2",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_port(port, timeout=20)
        wait_port(mport + 1, timeout=20)
        node = uid("n")
        reg = UMBPMasterClient(f"127.0.0.1:{port}", node_id=node, node_address=node)
        reg.register_self({UMBPTierType.DRAM: (GIB, GIB)})
        hashes = [uid("h") for _ in range(3)]
        reg.report_external_kv_blocks(node, hashes, UMBPTierType.DRAM)
        for _ in range(24):  # separate connections: the kernel spreads them over both processes
            ch = grpc.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.use_local_subchannel_pool", 1)])
            r = pb_grpc.UMBPMasterStub(ch).MatchExternalKv(pb.MatchExternalKvRequest(hashes=hashes), timeout=5)
            assert [m.node_id for m in r.matches] == [node], "both processes see one store"
            ch.close()
        served = [
            _value(_scrape(p), 'mori_umbp_master_rpc_latency_seconds_count{rpc="MatchExternalKv"}')
            if 'rpc="MatchExternalKv"' in _scrape(p)
            else 0.0
            for p in (mport, mport + 1)
        ]
        assert sum(served) == 24 and min(served) > 0, served
    finally:
        proc.send_signal(signal.SIGTERM)
        out = proc.communicate(timeout=20)[0]
        redis.stop()
    assert proc.returncode == 0, out
