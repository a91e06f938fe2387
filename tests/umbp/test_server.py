# SPDX-License-Identifier: MIT
"""MORI-UMBP's per-host server (StandaloneProcess mode): ranks sharing one server, a rank killed
mid-batch, a server killed and restarted, strangers and garbage refused, two ranks auto-starting.
"""

from __future__ import annotations

import mmap
import os
import shutil
import signal
import socket
import stat
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator, Optional

import numpy as np
import pytest

umbp = pytest.importorskip("mori.umbp")
from mori import _C  # noqa: E402

PROGRAM = Path(__file__).parent / "programs" / "umbp_rank.py"
sys.path.insert(0, str(PROGRAM.parent))
import umbp_rank  # noqa: E402
from server_wire import FRAME, MAGIC, OP_BATCH_EXISTS, OP_BATCH_PUT, OP_PING, OP_REGISTER, VERSION, frame, read_reply  # noqa: E402


def server_env(extra: Optional[dict] = None) -> dict:
    env = dict(os.environ)
    env.update({"PYTHONUNBUFFERED": "1", "UMBP_DRAM_PREFAULT": "0", "UMBP_SSD_ENABLED": "0"})
    env.update(extra or {})
    return env


class ServerProcess:
    """`python -m mori.umbp.server` at `address`, in a process of its own."""

    def __init__(self, address: str, log: Path, env: Optional[dict] = None):
        self.env = env
        self.address = address
        self.path = Path(address[len("unix://") :])
        self.log = log
        self.proc: Optional[subprocess.Popen] = None

    def start(self) -> "ServerProcess":
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "mori.umbp.server",
                    "--address",
                    self.address,
                    "--no-ssd",
                    "--dram-capacity",
                    "512MiB",
                ],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=server_env(self.env),
            )
        end = time.monotonic() + 30
        while not self._answers():
            assert self.proc.poll() is None, f"server exited early: {self.log.read_text()}"
            assert time.monotonic() < end, f"server did not listen within 30 s: {self.log.read_text()}"
            time.sleep(0.02)
        return self

    def _answers(self) -> bool:
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.connect(str(self.path))
            return True
        except OSError:
            return False

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
            self.proc.kill()
            self.proc.wait(timeout=10)


@pytest.fixture
def sockdir(tmp_path: Path) -> Path:
    d = tmp_path / "sock"
    d.mkdir()
    return d


@pytest.fixture
def server(sockdir: Path, tmp_path: Path) -> Iterator[ServerProcess]:
    s = ServerProcess(f"unix://{sockdir}/umbp.sock", tmp_path / "server.log").start()
    yield s
    s.kill()


def launch(*args: str, log: Path, env: Optional[dict] = None) -> subprocess.Popen:
    out = open(log, "wb")
    p = subprocess.Popen(
        [sys.executable, str(PROGRAM), *args],
        stdin=subprocess.DEVNULL,
        stdout=out,
        stderr=subprocess.STDOUT,
        env=server_env(env),
    )
    out.close()
    return p


def finish(p: subprocess.Popen, log: Path, timeout: float = 60) -> str:
    try:
        rc = p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        raise AssertionError(f"rank hung: {log.read_text()}")
    text = log.read_text()
    assert rc == 0, f"rank failed (rc {rc}): {text}"
    return text


def test_four_ranks_share_one_server(server: ServerProcess, tmp_path: Path) -> None:
    sync = tmp_path / "sync"
    sync.mkdir()
    ranks = [launch("share", server.address, str(r), "4", str(sync), log=tmp_path / f"r{r}.log") for r in range(4)]
    for r, p in enumerate(ranks):
        assert f"rank {r} OK" in finish(p, tmp_path / f"r{r}.log")


def test_four_ranks_share_a_polling_server(sockdir: Path, tmp_path: Path) -> None:
    """UMBP_SERVER_POLL_US: the ranks busy-poll for their replies and the server's connection
    threads for the next request before they sleep; every byte as without it."""
    poll = {"UMBP_SERVER_POLL_US": "200"}
    server = ServerProcess(f"unix://{sockdir}/umbp.sock", tmp_path / "server.log", env=poll).start()
    try:
        sync = tmp_path / "sync"
        sync.mkdir()
        ranks = [
            launch("share", server.address, str(r), "4", str(sync), log=tmp_path / f"r{r}.log", env=poll)
            for r in range(4)
        ]
        for r, p in enumerate(ranks):
            assert f"rank {r} OK" in finish(p, tmp_path / f"r{r}.log")
        # A window out of range is refused by the rank, naming the setting.
        bad = launch(
            "share", server.address, "0", "1", str(sync), log=tmp_path / "bad.log", env={"UMBP_SERVER_POLL_US": "-1"}
        )
        assert bad.wait(timeout=60) != 0
        assert "UMBP_SERVER_POLL_US" in (tmp_path / "bad.log").read_text()
    finally:
        server.kill()


def test_rank_killed_mid_batch_leaves_no_half_visible_key(server: ServerProcess, tmp_path: Path) -> None:
    sync = tmp_path / "sync"
    sync.mkdir()
    victim = launch("victim", server.address, str(sync), log=tmp_path / "victim.log")
    end = time.monotonic() + 60
    while not (sync / "victim_running").exists():
        assert victim.poll() is None, (tmp_path / "victim.log").read_text()
        assert time.monotonic() < end, "the victim never got going"
        time.sleep(0.005)
    others = [launch("share", server.address, str(r), "3", str(sync), log=tmp_path / f"r{r}.log") for r in range(3)]
    time.sleep(float(np.random.default_rng().uniform(0.05, 0.3)))  # somewhere inside a batch
    victim.kill()
    victim.wait(timeout=10)
    assert victim.returncode == -signal.SIGKILL, (tmp_path / "victim.log").read_text()
    assert "finished its batches" not in (tmp_path / "victim.log").read_text()  # killed mid-run
    for r, p in enumerate(others):
        assert f"rank {r} OK" in finish(p, tmp_path / f"r{r}.log")

    # Every victim key that exists holds exactly what the victim wrote.
    c = umbp_rank.client(server.address)
    got = np.zeros(umbp_rank.VICTIM_VALUE, np.uint8)
    present = 0
    for b in range(umbp_rank.VICTIM_MAX_BATCHES):
        keys = [f"victim_b{b}_k{i}" for i in range(umbp_rank.VICTIM_BATCH)]
        for i, there in enumerate(c.batch_exists(keys)):
            if not there:
                continue
            present += 1
            assert c.get_into_ptr(keys[i], int(got.ctypes.data), got.nbytes)
            assert np.array_equal(got, umbp_rank.value(999, b, i, umbp_rank.VICTIM_VALUE)), keys[i]
    assert present >= 3 * umbp_rank.VICTIM_BATCH  # the batches before the kill were all there


def test_dead_or_stopped_server_is_an_error_within_the_deadline(server: ServerProcess, monkeypatch) -> None:
    monkeypatch.setenv("UMBP_CALL_TIMEOUT_MS", "1500")
    c = umbp_rank.client(server.address)
    h, buf = umbp_rank.shm_buffer(1 << 20)
    buf[:] = np.random.default_rng().integers(0, 256, buf.size, dtype=np.uint8)
    assert c.register_memory(h.ptr, 1 << 20)
    assert c.put_from_ptr("before", h.ptr, 4096)

    server.kill()
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match=str(server.path)):
        c.exists("before")
    assert time.monotonic() - t0 < 1.5

    server.start()  # a fresh, empty store at the same address: the next call reconnects
    assert not c.exists("before")
    assert c.put_from_ptr("after", h.ptr + 8192, 65536)  # the region was handed over again
    out = np.zeros(65536, np.uint8)
    assert c.get_into_ptr("after", int(out.ctypes.data), out.nbytes)
    assert np.array_equal(out, buf[8192 : 8192 + 65536])

    os.kill(server.proc.pid, signal.SIGSTOP)  # alive but not answering
    wait_stopped(server.proc.pid)
    try:
        t0 = time.monotonic()
        with pytest.raises(TimeoutError, match=str(server.path)):
            c.exists("after")
        assert 1.4 < time.monotonic() - t0 < 3.5
    finally:
        os.kill(server.proc.pid, signal.SIGCONT)
    assert c.exists("after")  # the same server, answering again: a fresh connection works


def wait_stopped(pid: int) -> None:
    """Returns once every thread of `pid` is stopped (kill() returns before the stop lands)."""
    end = time.monotonic() + 10
    while True:
        states = [(t / "stat").read_text().rsplit(")", 1)[1].split()[0] for t in Path(f"/proc/{pid}/task").iterdir()]
        if all(s == "T" for s in states):
            return
        assert time.monotonic() < end, f"process {pid} did not stop: {states}"
        time.sleep(0.005)


def test_unregistered_memory_and_plain_memfd_buffers(server: ServerProcess) -> None:
    c = umbp_rank.client(server.address)
    # A memfd the application mapped itself (not from UMBPHostMemAllocator): found via /proc/self/maps.
    fd = os.memfd_create("app-kv")
    os.ftruncate(fd, 1 << 20)
    m = mmap.mmap(fd, 1 << 20)
    os.close(fd)
    arr = np.frombuffer(m, np.uint8)
    arr[:] = np.random.default_rng().integers(0, 256, arr.size, dtype=np.uint8)
    assert c.register_memory(int(arr.ctypes.data), arr.nbytes)
    keys = [f"memfd_{i}" for i in range(16)]
    size = 1 << 16
    assert all(c.batch_put_from_ptr(keys, [int(arr.ctypes.data) + i * size for i in range(16)], [size] * 16))
    private = np.zeros(16 * size, np.uint8)  # private memory: the server's process_vm path
    assert all(c.batch_get_into_ptr(keys, [int(private.ctypes.data) + i * size for i in range(16)], [size] * 16))
    assert np.array_equal(private, arr)
    # Private memory cannot be registered: a clear error saying what to use.
    with pytest.raises(ValueError, match="AnonymousShm"):
        c.register_memory(int(private.ctypes.data), private.nbytes)
    # Bad arguments: an error naming the argument, nothing stored.
    with pytest.raises(ValueError, match="sizes"):
        c.batch_put_from_ptr(["bad1", "bad2"], [int(arr.ctypes.data)] * 2, [size])
    with pytest.raises(ValueError, match="put_from_ptr: size must be > 0"):
        c.put_from_ptr("bad3", int(arr.ctypes.data), 0)
    assert c.batch_exists(["bad1", "bad2", "bad3"]) == [False, False, False]
    del arr
    c.deregister_memory(int(np.frombuffer(m, np.uint8).ctypes.data))


def test_every_call_goes_through_the_server(server: ServerProcess) -> None:
    c = umbp_rank.client(server.address)
    local_cfg = umbp.UMBPConfig()
    local_cfg.ssd.enabled = False
    local_cfg.dram.capacity_bytes = 16 << 20
    local = umbp.UMBPClient(local_cfg)
    assert c.get_deployment_mode() == umbp.UMBPDeploymentMode.StandaloneProcess and not c.is_distributed()
    data = np.random.default_rng().integers(0, 256, 4 * 4096, dtype=np.uint8)
    keys = [f"calls_{i}" for i in range(4)]
    ptrs = [int(data.ctypes.data) + i * 4096 for i in range(4)]
    assert c.batch_put_from_ptr_with_depth(keys, ptrs, [4096] * 4, [3, 2, 1, -1]) == [True] * 4
    assert c.batch_exists(keys + ["calls_missing"]) == [True] * 4 + [False]
    assert c.batch_exists_consecutive([keys[0], keys[1], "calls_missing", keys[2]]) == 2
    assert c.flush()
    st = c.stats()
    assert st["puts"] >= 4 and st["dram_keys"] >= 4
    # The external-KV calls reach the server's store, which answers as the local store does.
    tier = umbp.UMBPTierType.DRAM
    assert c.report_external_kv_blocks(["h1"], tier) == local.report_external_kv_blocks(["h1"], tier)
    assert c.revoke_external_kv_blocks(["h1"], tier) == local.revoke_external_kv_blocks(["h1"], tier)
    assert c.revoke_all_external_kv_blocks_at_tier(tier) == local.revoke_all_external_kv_blocks_at_tier(tier)
    assert len(c.match_external_kv(["h1"], True)) == len(local.match_external_kv(["h1"], True))
    assert len(c.get_external_kv_hit_counts(["h1"])) == len(local.get_external_kv_hit_counts(["h1"]))
    assert c.clear()
    assert c.batch_exists(keys) == [False] * 4
    c.close()
    local.close()


def closed(s: socket.socket) -> bool:
    s.settimeout(5)
    return s.recv(1) == b""


def in_process_server(address: str):
    srv = _C.umbp.start_server(address, 0, None, dram_capacity=64 << 20, ssd_enabled=False)
    assert srv is not None
    return srv


def test_garbage_and_lying_workers_get_errors_server_keeps_serving(sockdir: Path) -> None:
    address = f"unix://{sockdir}/g.sock"
    srv = in_process_server(address)
    try:
        path = str(sockdir / "g.sock")
        good = umbp_rank.client(address)
        value = np.random.default_rng().integers(0, 256, 8192, dtype=np.uint8)
        assert good.put_from_ptr("good", int(value.ctypes.data), value.nbytes)

        with socket.socket(socket.AF_UNIX) as s:  # not a frame at all
            s.connect(path)
            s.sendall(os.urandom(24))
            req, status, body = read_reply(s)
            assert status != 0 and b"not a MORI-UMBP frame" in body and closed(s)
        with socket.socket(socket.AF_UNIX) as s:  # a length over the limit: refused before allocating
            s.connect(path)
            s.sendall(frame(OP_PING, length=0xFFFFFFF0))
            _, status, body = read_reply(s)
            assert status != 0 and b"exceeds the limit" in body and closed(s)
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(path)
            # A count that cannot fit its payload, then a truncated item: errors, the connection goes on.
            s.sendall(frame(OP_BATCH_EXISTS, struct.pack("<I", 1 << 30), req=5))
            req, status, body = read_reply(s)
            assert req == 5 and status != 0 and b"exceed" in body
            s.sendall(frame(OP_BATCH_EXISTS, struct.pack("<II", 1, 400) + b"abc", req=6))
            req, status, body = read_reply(s)
            assert req == 6 and status != 0 and b"malformed" in body
            s.sendall(frame(99, req=7))
            req, status, body = read_reply(s)
            assert req == 7 and b"unknown request op" in body
            s.sendall(frame(OP_PING, req=8))
            req, status, body = read_reply(s)
            assert (req, status, body[0]) == (8, 0, 1)

            # A memory file of one page, claimed to be two: refused.
            mfd = os.memfd_create("liar")
            os.ftruncate(mfd, 4096)
            reg = frame(OP_REGISTER, struct.pack("<QQQ", 0x10000, 8192, 0), req=9)
            socket.send_fds(s, [reg], [mfd])
            req, status, body = read_reply(s)
            assert req == 9 and status != 0 and b"runs past the memory file" in body
            socket.send_fds(s, [frame(OP_REGISTER, struct.pack("<QQQ", 0x10000, 4096, 0), req=10)], [mfd])
            req, status, body = read_reply(s)
            assert req == 10 and status == 0
            region = struct.unpack("<I", body)[0]
            os.close(mfd)

            def put(region_id: int, offset: int, size: int, req_id: int) -> tuple[int, bytes]:
                key = b"liar"
                item = struct.pack("<I", len(key)) + key + struct.pack("<IQQ", region_id, offset, size)
                s.sendall(frame(OP_BATCH_PUT, struct.pack("<BI", 0, 1) + item, req=req_id))
                r, st, b = read_reply(s)
                assert r == req_id
                return st, b

            st, body = put(region, 4000, 200, 11)  # past the region's end
            assert st != 0 and b"outside registered region" in body
            st, body = put(region, (1 << 64) - 8, 16, 12)  # an offset that would wrap
            assert st != 0 and b"outside registered region" in body
            st, body = put(region + 7, 0, 16, 13)  # a region it never registered
            assert st != 0 and b"not registered" in body
            st, body = put(region, 0, 4096, 14)  # in bounds: stored
            assert st == 0 and body == b"\x01"

        # The others were served all along.
        out = np.zeros(8192, np.uint8)
        assert good.get_into_ptr("good", int(out.ctypes.data), out.nbytes)
        assert np.array_equal(out, value)
        assert not good.exists("liarX") and good.exists("liar")
        counters = srv.counters()
        assert counters["bad_frames"] == 2 and counters["errors"] == 7
    finally:
        srv.stop()


def test_frames_that_arrive_together_or_in_pieces(sockdir: Path) -> None:
    """The server reads a frame's header and payload with one read where they came together: frames
    sent back to back in one write, a frame cut in pieces, and a descriptor riding with the second
    frame of a write are each answered as if sent alone."""
    address = f"unix://{sockdir}/p.sock"
    srv = in_process_server(address)
    try:
        rng = np.random.default_rng()
        keys = [f"p{rng.integers(1 << 62):x}".encode() for _ in range(3)]
        exists = struct.pack("<I", len(keys)) + b"".join(struct.pack("<I", len(k)) + k for k in keys)
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(str(sockdir / "p.sock"))
            s.settimeout(10)
            s.sendall(frame(OP_PING, req=1) + frame(OP_BATCH_EXISTS, exists, req=2) + frame(OP_PING, req=3))
            assert read_reply(s)[:2] == (1, 0)
            assert read_reply(s) == (2, 0, b"\x00" * len(keys))
            assert read_reply(s)[:2] == (3, 0)
            whole = frame(OP_BATCH_EXISTS, exists, req=4)
            cuts = [0, 10, FRAME.size + 5, len(whole)]  # the header in two pieces, then the payload in two
            for a, b in zip(cuts, cuts[1:]):
                s.sendall(whole[a:b])
                time.sleep(0.05)
            assert read_reply(s) == (4, 0, b"\x00" * len(keys))
            mfd = os.memfd_create("pair")
            os.ftruncate(mfd, 4096)
            reg = frame(OP_REGISTER, struct.pack("<QQQ", 0x20000, 4096, 0), req=6)
            socket.send_fds(s, [frame(OP_PING, req=5) + reg], [mfd])
            os.close(mfd)
            assert read_reply(s)[:2] == (5, 0)
            req, status, body = read_reply(s)
            assert (req, status, len(body)) == (6, 0, 4)
        assert srv.counters()["errors"] == 0
    finally:
        srv.stop()


def test_other_users_are_refused(tmp_path: Path) -> None:
    setpriv = shutil.which("setpriv")
    if os.geteuid() != 0 or not setpriv:
        pytest.skip("needs root and setpriv to run a client as another user (nobody)")
    d = Path("/tmp") / f"mori-umbp-stranger-{os.getpid()}"
    d.mkdir(mode=0o755, exist_ok=True)
    os.chmod(d, 0o755)
    address = f"unix://{d}/s.sock"
    srv = in_process_server(address)
    try:
        path = d / "s.sock"
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        probe = (
            "import socket,struct,sys\n"
            "s=socket.socket(socket.AF_UNIX)\n"
            "try:\n s.connect(sys.argv[1])\n"
            "except PermissionError:\n print('EACCES'); sys.exit(0)\n"
            "try:\n"  # the server may have refused and closed before this arrives
            f" s.sendall(struct.pack('<IHHQII',{MAGIC},{VERSION},{OP_PING},1,0,0))\n"
            "except OSError:\n pass\n"
            "h=s.recv(24); m,v,o,i,st,n=struct.unpack('<IHHQII',h); b=s.recv(n)\n"
            "print('STATUS',st,b.decode()); print('EOF', s.recv(1)==b'')\n"
        )
        cmd = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c", probe, str(path)]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
        assert out.stdout.strip() == "EACCES", out.stdout + out.stderr  # the 0600 socket keeps it out
        os.chmod(path, 0o666)  # past the file mode, SO_PEERCRED still refuses it
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
        assert "STATUS 6 refused" in out.stdout and "EOF True" in out.stdout, out.stdout + out.stderr
        assert srv.counters()["refused"] == 1
        assert srv.counters()["requests"] == 0
    finally:
        srv.stop()
        shutil.rmtree(d, ignore_errors=True)


def server_pids(address: str) -> list[int]:
    pids = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            cmd = (p / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"mori.umbp.server" in cmd and address.encode() in cmd:
            pids.append(int(p.name))
    return pids


def test_two_ranks_auto_starting_end_with_one_server(sockdir: Path, tmp_path: Path) -> None:
    sync = tmp_path / "sync"
    sync.mkdir()
    address = f"unix://{sockdir}/auto.sock"
    env = {"UMBP_STANDALONE_IDLE_EXIT_TIMEOUT_MS": "1500"}
    procs = []
    for r in range(2):
        out = open(tmp_path / f"race{r}.log", "wb")
        procs.append(
            subprocess.Popen(
                [sys.executable, str(PROGRAM), "race", address, str(r), str(sync)],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=server_env(env),
            )
        )
        out.close()
    try:
        for r, p in enumerate(procs):
            assert f"rank {r} OK" in finish(p, tmp_path / f"race{r}.log")
        pids = server_pids(address)
        log = (sockdir / "auto.sock.log").read_text()
        assert len(pids) == 1 and log.count("listening at") == 1, f"servers for {address}: {pids}; log: {log}"
        # With no worker left, it exits after the idle timeout and removes its socket.
        end = time.monotonic() + 15
        while server_pids(address):
            assert time.monotonic() < end, "the idle server did not exit"
            time.sleep(0.05)
        assert not (sockdir / "auto.sock").exists()
    finally:
        for pid in server_pids(address):
            os.kill(pid, signal.SIGKILL)
