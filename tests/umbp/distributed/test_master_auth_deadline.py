# SPDX-License-Identifier: MIT
"""Beyond MORI: signed control-plane RPCs (a stranger gets UNAUTHENTICATED and changes nothing,
replays and stale signatures are refused, the secret never crosses the wire) and a deadline on
every client call (a hung or dead master is an error within lookup_timeout_ms, never a hang)."""

from __future__ import annotations

import socket
import time

import grpc
import pytest
from umbp_master_harness import DRAM, GIB, fast_settings, pb, pb_grpc, running_master, uid

from mori import _C
from mori.core.errors import RemoteError, Timeout
from mori.core.ports import free_port
from mori.umbp import UMBPTierType
from mori.umbp.distributed import UMBPMasterClient
from mori.umbp.distributed.master_auth import sign
from mori.umbp.proto import require

admin_pb = require("umbp_admin_pb2")


@pytest.fixture(scope="module", params=["python", "cpp"])
def secured(request):
    """A signed master under each gRPC server: grpcio's interceptor and the grpc++ server's own
    check (before its native get path) must refuse alike."""
    from mori.umbp.distributed.master_server import MasterServer, cpp_server

    if request.param == "cpp" and cpp_server() is None:
        pytest.skip("no grpc++ in this build")
    secret_hex = _C.core.random_secret_hex()
    secret = bytes.fromhex(secret_hex)
    m = MasterServer("127.0.0.1:0", settings=fast_settings(auth_window_ms=2000), secret=secret, server=request.param)
    m.start()
    m.address = f"127.0.0.1:{m.port}"
    try:
        yield m, secret_hex, secret
    finally:
        m.stop(grace=0)


def test_signed_client_works_and_stranger_changes_nothing(secured):
    m, secret_hex, _ = secured
    node = uid("n")
    good = UMBPMasterClient(m.address, node_id=node, node_address=node, secret_hex=secret_hex)
    good.register_self({UMBPTierType.DRAM: (GIB, GIB)})
    hashes = [uid("h") for _ in range(3)]
    good.report_external_kv_blocks(node, hashes, UMBPTierType.DRAM)
    assert [x.node_id for x in good.match_external_kv(hashes)] == [node]

    for stranger in (
        UMBPMasterClient(m.address, secret_hex=""),
        UMBPMasterClient(m.address, secret_hex=_C.core.random_secret_hex()),
    ):
        with pytest.raises(RemoteError, match="signature|unsigned"):
            stranger.match_external_kv(hashes)
        with pytest.raises(RemoteError):
            stranger.revoke_all_external_kv_blocks_for_node(node)
        with pytest.raises(RemoteError, match="signature|unsigned"):  # where values lie: not for strangers
            stranger._call("PlaceFeed", admin_pb.PlaceFeedRequest(), admin=True)
        with pytest.raises(RemoteError):
            stranger.clear_cluster()
    assert [x.node_id for x in good.match_external_kv(hashes)] == [node], "strangers changed nothing"
    assert good._call("PlaceFeed", admin_pb.PlaceFeedRequest(node_id=node), admin=True).feed_id != 0
    assert m.metrics.auth_refused._value.get() >= 6


def test_replayed_tampered_and_stale_calls_are_refused(secured):
    m, _, secret = secured
    node = uid("n")
    stub = pb_grpc.UMBPMasterStub(grpc.insecure_channel(m.address))
    req = pb.RegisterClientRequest(
        node_id=node,
        tier_capacities=[pb.TierCapacity(tier=DRAM, total_capacity_bytes=GIB, available_capacity_bytes=GIB)],
    )
    md = sign(secret, "/umbp.UMBPMaster/RegisterClient", req.SerializeToString())
    assert b"".join(v.encode() for _, v in md).find(secret) < 0 and secret.hex() not in str(md)
    stub.RegisterClient(req, metadata=md, timeout=5)
    stub.UnregisterClient(
        pb.UnregisterClientRequest(node_id=node),
        timeout=5,
        metadata=sign(
            secret, "/umbp.UMBPMaster/UnregisterClient", pb.UnregisterClientRequest(node_id=node).SerializeToString()
        ),
    )
    with pytest.raises(grpc.RpcError) as err:  # the captured call, replayed
        stub.RegisterClient(req, metadata=md, timeout=5)
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert m.store.get_client(node) is None, "the replay registered nothing"
    other = pb.RegisterClientRequest(node_id=uid("evil"))
    with pytest.raises(grpc.RpcError) as err:  # a signature for another body
        stub.RegisterClient(
            other, metadata=sign(secret, "/umbp.UMBPMaster/RegisterClient", req.SerializeToString()), timeout=5
        )
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    with pytest.raises(grpc.RpcError) as err:  # a signature for another method
        stub.RegisterClient(
            other, metadata=sign(secret, "/umbp.UMBPMaster/Heartbeat", other.SerializeToString()), timeout=5
        )
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    stale = [
        (k, str(int(v) - 5000)) if k == "x-umbp-ts" else (k, v)
        for k, v in sign(secret, "/umbp.UMBPMaster/RegisterClient", other.SerializeToString())
    ]
    with pytest.raises(grpc.RpcError) as err:
        stub.RegisterClient(other, metadata=stale, timeout=5)
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert m.store.get_client(other.node_id) is None


def test_hung_master_is_a_timeout_within_the_deadline():
    # a listener that accepts connections and never speaks: the worst kind of master
    with socket.socket() as hung:
        hung.bind(("127.0.0.1", 0))
        hung.listen(16)
        addr = f"127.0.0.1:{hung.getsockname()[1]}"
        c = UMBPMasterClient(addr, node_id="n", lookup_timeout_ms=300)
        for call in (
            lambda: c.match_external_kv(["h"]),
            lambda: c.batch_route_get(["k"]),
            lambda: c.register_self({UMBPTierType.DRAM: (1, 1)}),
        ):
            t0 = time.monotonic()
            with pytest.raises((Timeout, RemoteError)) as err:
                call()
            assert time.monotonic() - t0 < 1.5
            assert addr in str(err.value)
        assert isinstance(err.value, TimeoutError) or isinstance(err.value, RemoteError)


def test_dead_master_is_an_error_naming_it():
    addr = f"127.0.0.1:{free_port()}"
    c = UMBPMasterClient(addr, lookup_timeout_ms=500)
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match=addr):
        c.batch_lookup(["k"])
    assert time.monotonic() - t0 < 2.0


def test_master_killed_mid_session_then_back():
    with running_master() as m:
        port = m.port
        c = UMBPMasterClient(m.address, node_id=uid("n"), lookup_timeout_ms=500)
        assert c.batch_lookup(["k"]) == [False]
    t0 = time.monotonic()
    with pytest.raises(RuntimeError):
        c.batch_lookup(["k"])
    assert time.monotonic() - t0 < 2.0
    from mori.umbp.distributed.master_server import MasterServer

    again = MasterServer(f"127.0.0.1:{port}", settings=fast_settings())
    again.start()
    try:
        deadline = time.monotonic() + 5
        while True:
            try:
                assert c.batch_lookup(["k"]) == [False]
                break
            except RuntimeError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
    finally:
        again.stop(grace=0)
