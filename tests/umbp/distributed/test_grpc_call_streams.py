# SPDX-License-Identifier: MIT
"""Call streams (umbp_admin.proto's UMBPCallStream): the native client channel carries its calls
as the messages of long-lived streams where the grpc++ server answers them. Each streamed call
must be answered exactly as its unary call is (handler, codes, signature check, deadline), a
server without streams must be met with unary calls, and neither a stopped server nor a stranger
writing on a stream may hang or fool anything."""

from __future__ import annotations

import os
import random
import threading
import time

import grpc
import pytest
from umbp_master_harness import DRAM, GIB, PeerSession, echo_from_threads, fast_settings, pb, uid, wait_for

from mori import _C
from mori.umbp.distributed.master_auth import sign
from mori.umbp.distributed.master_server import MasterServer, cpp_server
from mori.umbp.proto import require

CPP = cpp_server()
pytestmark = pytest.mark.skipif(CPP is None, reason="no grpc++ in this build")
admin_pb = require("umbp_admin_pb2")

CALLS = "/umbp.UMBPCallStream/Calls"


def _echo_server(delay_s: float = 0.0, workers: int = 4):
    """A grpc++ server whose handler answers a request reversed and notes what it saw."""
    seen = []

    def handler(method, request, metadata, peer, remaining):
        seen.append((method, dict(metadata), remaining))
        if delay_s:
            time.sleep(delay_s)
        if method == "/t.T/Fail":
            return 9, "failed precondition: told so", b""
        return 0, "", request[::-1]

    server = CPP.MasterGrpcServer("127.0.0.1:0", handler, workers=workers)
    port = server.start()
    return server, f"127.0.0.1:{port}", seen


@pytest.mark.timeout(60)
def test_streamed_calls_are_answered_as_unary_ones():
    server, address, seen = _echo_server()
    try:
        streamed = CPP.GrpcChannel(address)
        unary = CPP.GrpcChannel(address, streams=False)
        rng = random.Random(os.urandom(8))
        for size in (0, 1, 4095, 9 << 20):  # 9 MiB: past grpc's 4 MiB default limit
            body = rng.randbytes(size)
            assert streamed.call("/t.T/Echo", body, 10) == unary.call("/t.T/Echo", body, 10) == (0, "", body[::-1])
        assert streamed.streams and not unary.streams and server.streams_open == 1
        assert streamed.call("/t.T/Fail", b"", 5) == unary.call("/t.T/Fail", b"", 5)
        assert streamed.call("/t.T/Fail", b"", 5)[:2] == (9, "failed precondition: told so")
        # The handler sees the method, and the caller's deadline as time remaining (none: None).
        streamed.call("/t.T/Echo", b"x", 10)
        assert seen[-1][0] == "/t.T/Echo" and 0 < seen[-1][2] <= 10
        streamed.call("/t.T/Echo", b"x", 0)
        assert seen[-1][2] is None

        # Many callers at once: one stream each, every reply its own request's.
        errors = echo_from_threads(lambda b: streamed.call("/t.T/Echo", b, 10)[2], calls=50)
        assert not errors
        assert 1 <= server.streams_open <= 9
        streamed = None  # its streams end with it
        assert wait_for(lambda: server.streams_open == 0)
    finally:
        server.stop(0)


@pytest.mark.timeout(60)
def test_a_deadline_ends_the_stream_and_the_next_call_takes_a_new_one():
    server, address, seen = _echo_server(delay_s=0.5)
    try:
        ch = CPP.GrpcChannel(address)
        assert ch.call("/t.T/Echo", b"ab", 5) == (0, "", b"ba")
        t0 = time.monotonic()
        code, details, _ = ch.call("/t.T/Echo", b"ab", 0.1)
        assert code == grpc.StatusCode.DEADLINE_EXCEEDED.value[0] and time.monotonic() - t0 < 0.45
        assert ch.call("/t.T/Echo", b"cd", 5) == (0, "", b"dc")  # a late reply is not taken for this one
        assert ch.streams
    finally:
        server.stop(0)


@pytest.mark.timeout(60)
def test_stopped_server_ends_idle_streams_at_once_and_a_restarted_one_is_found():
    server, address, _ = _echo_server()
    port = int(address.rsplit(":", 1)[1])
    ch = CPP.GrpcChannel(address)
    assert ch.call("/t.T/Echo", b"ab", 5) == (0, "", b"ba")
    t0 = time.monotonic()
    server.stop(10)  # the idle stream must not hold the whole grace time
    assert time.monotonic() - t0 < 2
    t0 = time.monotonic()
    code, details, _ = ch.call("/t.T/Echo", b"ab", 2)
    assert code == grpc.StatusCode.UNAVAILABLE.value[0] and time.monotonic() - t0 < 2.5, (code, details)
    again = CPP.MasterGrpcServer(f"127.0.0.1:{port}", lambda *a: (0, "", b"again"), workers=2)
    again.start()
    try:
        assert wait_for(lambda: ch.call("/t.T/Echo", b"ab", 1) == (0, "", b"again"), 10)
        assert ch.streams
    finally:
        again.stop(0)


@pytest.mark.timeout(60)
def test_a_server_without_call_streams_gets_unary_calls():
    m = MasterServer("127.0.0.1:0", settings=fast_settings(), server="python")  # grpcio: no streams
    m.start()
    try:
        peer = PeerSession(f"127.0.0.1:{m.port}", "node-a", {DRAM: (GIB, GIB)}, peer_address="10.0.0.1:7")
        key = uid("k")
        peer.heartbeat([("add", key, DRAM, 100, 0, 7)])
        ch = CPP.GrpcChannel(f"127.0.0.1:{m.port}")
        code, _, body = ch.call(
            "/umbp.UMBPMaster/BatchLookup", pb.BatchLookupRequest(keys=[key]).SerializeToString(), 5
        )
        assert code == 0 and list(pb.BatchLookupResponse.FromString(body).found) == [True]
        assert not ch.streams
        peer.close()
    finally:
        m.stop(0)


@pytest.mark.timeout(60)
def test_signed_streamed_calls_and_strangers_on_a_stream():
    """With a job secret every streamed call is checked as a unary one is: a stranger writing
    forged, unsigned, replayed or nested calls on a stream gets refusals and changes nothing."""
    secret = bytes.fromhex(_C.core.random_secret_hex())
    m = MasterServer("127.0.0.1:0", settings=fast_settings(), secret=secret, server="cpp")
    m.start()
    address = f"127.0.0.1:{m.port}"
    try:
        ch = CPP.GrpcChannel(address, secret=secret)
        node = uid("node")
        reg = pb.RegisterClientRequest(node_id=node, node_address="10.0.0.2:1", peer_address="10.0.0.2:2")
        reg.tier_capacities.add(tier=DRAM, total_capacity_bytes=GIB, available_capacity_bytes=GIB)
        code, details, _ = ch.call("/umbp.UMBPMaster/RegisterClient", reg.SerializeToString(), 5)
        assert code == 0, details
        assert ch.streams and m.store.get_client(node) is not None

        # A stranger's stream: unsigned, wrongly signed, a replay of a signed message, a call
        # stream inside a call stream, bytes that do not parse.
        stranger = uid("stranger")
        forged = pb.RegisterClientRequest(node_id=stranger, node_address="6.6.6.6:1", peer_address="6.6.6.6:2")
        forged.tier_capacities.add(tier=DRAM, total_capacity_bytes=GIB, available_capacity_bytes=GIB)
        second = uid("node")  # the job's own next call, signed, which the stranger saw on the wire
        reg2 = pb.RegisterClientRequest(node_id=second, node_address="10.0.0.3:1", peer_address="10.0.0.3:2")
        reg2.tier_capacities.add(tier=DRAM, total_capacity_bytes=GIB, available_capacity_bytes=GIB)
        ts, nonce, sig = [v for _k, v in sign(secret, "/umbp.UMBPMaster/RegisterClient", reg2.SerializeToString())]
        register = "/umbp.UMBPMaster/RegisterClient"
        messages = [
            admin_pb.StreamedCall(method=register, request=forged.SerializeToString()),
            admin_pb.StreamedCall(method=register, request=forged.SerializeToString(), ts=ts, nonce=nonce, sig=sig),
            admin_pb.StreamedCall(method=register, request=reg2.SerializeToString(), ts=ts, nonce=nonce, sig=sig),
            admin_pb.StreamedCall(method=register, request=reg2.SerializeToString(), ts=ts, nonce=nonce, sig=sig),
            admin_pb.StreamedCall(method=CALLS, request=b""),
        ]
        raw = grpc.insecure_channel(address)
        calls = raw.stream_stream(CALLS)
        replies = [
            admin_pb.StreamedReply.FromString(r)
            for r in calls(iter([mm.SerializeToString() for mm in messages] + [b"\xff\xff\xff"]), timeout=10)
        ]
        codes = [r.code for r in replies]
        unauth = grpc.StatusCode.UNAUTHENTICATED.value[0]
        assert codes[:2] == [unauth, unauth]
        assert "unsigned" in replies[0].details and "bad signature" in replies[1].details
        assert codes[2] == 0 and m.store.get_client(second) is not None  # the job's call, delivered once...
        assert codes[3] == unauth and "replay" in replies[3].details  # ...and never twice
        assert codes[4] == grpc.StatusCode.INVALID_ARGUMENT.value[0]
        assert codes[5] == grpc.StatusCode.INTERNAL.value[0]
        assert m.store.get_client(stranger) is None
        raw.close()
    finally:
        m.stop(0)


@pytest.mark.timeout(120)
def test_calls_racing_deadlines_and_a_stop_all_end():
    """8 threads call a server whose handler (on its handler threads) takes 0-30 ms, with
    deadlines of 5-40 ms, while the server stops under them: every call ends, with its reply or
    DEADLINE_EXCEEDED / UNAVAILABLE / CANCELLED, and none hangs."""

    def handler(method, request, metadata, peer, remaining):
        time.sleep(random.random() * 0.03)
        return 0, "", request[::-1]

    server = CPP.MasterGrpcServer("127.0.0.1:0", handler, workers=1)
    server.set_handler_threads(2)
    address = f"127.0.0.1:{server.start()}"
    ch = CPP.GrpcChannel(address)
    ok_codes = {0} | {
        c.value[0] for c in (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)
    }
    outcomes, wrong = [], []
    stop_at = time.monotonic() + 1.0

    def caller(i):
        rng = random.Random(i)
        while time.monotonic() < stop_at + 0.5:
            body = rng.randbytes(rng.randrange(1, 64))
            started = time.monotonic()
            code, details, reply = ch.call("/t.T/Echo", body, rng.uniform(0.005, 0.04))
            outcomes.append((started, code))
            if code not in ok_codes or (code == 0 and reply != body[::-1]):
                wrong.append((code, details))

    team = [threading.Thread(target=caller, args=(i,)) for i in range(8)]
    for t in team:
        t.start()
    time.sleep(max(0.0, stop_at - time.monotonic()))
    server.stop(0.05)
    stopped = time.monotonic()
    # Calls whose deadline passed in the handlers' queue were dropped, not run late: the stop
    # does not wait out a backlog (the handlers serve fewer calls than the callers send).
    assert stopped - stop_at < 1.0
    for t in team:
        t.join(30)
    assert not any(t.is_alive() for t in team), "a call hung"
    assert not wrong, wrong[:5]
    codes = [code for _, code in outcomes]
    assert 0 in codes and grpc.StatusCode.DEADLINE_EXCEEDED.value[0] in codes
    after = [code for started, code in outcomes if started > stopped]
    assert after and 0 not in after  # nothing answers once the server has stopped
