# SPDX-License-Identifier: MIT
"""The pieces every ``mori bench`` driver shares: sizes, the launch-self, timing, the socket
reads, the report and the ``mori bench`` subcommands."""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import socket
import subprocess
import sys
import textwrap
import threading

import pytest

from mori.apps.bench import BENCHES, main as bench_main
from mori.apps.bench.launch import relaunch
from mori.apps.bench.report import Report
from mori.apps.bench.sizes import human_size, parse_count, parse_list, parse_size, size_sweep
from mori.apps.bench.timing import each_call_seconds, mean_seconds, median_of_slowest
from mori.apps.bench.wire import recv_exact, recv_into_exact


@pytest.mark.parametrize(
    "text,value",
    [
        ("8", 8),
        ("4K", 4096),
        ("4KiB", 4096),
        ("360K", 360 << 10),
        ("4.5M", 9 << 19),
        ("2 MiB", 2 << 20),
        ("1g", 1 << 30),
        (" 64 ", 64),
    ],
)
def test_parse_size(text, value):
    assert parse_size(text) == value


@pytest.mark.parametrize("text", ["0", "x", "-1", "1.5", "12XB", "", "0K"])
def test_parse_size_rejects_naming_the_option(text):
    with pytest.raises(ValueError) as err:
        parse_size(text, "--max-buffer")
    assert str(err.value).startswith(f"--max-buffer: {text!r} ")


def test_parse_count_and_list():
    rng = random.Random()
    counts = [rng.randrange(1, 10**6) for _ in range(5)]
    assert parse_list(",".join(map(str, counts)) + ",", "--batches", parse_count) == counts
    assert parse_list("8, 4K,,1M", "--sizes") == [8, 4096, 1 << 20]
    for bad in ("0", "4K", "1.0", "-3", "x"):
        with pytest.raises(ValueError, match=f"^--iters: {bad!r} "):
            parse_count(bad, "--iters")


def test_size_labels_and_sweep():
    assert [human_size(n) for n in (8, 1000, 1024, 1536, 360 << 10, 9 << 19, 1 << 30, (1 << 30) + 1)] == [
        "8 B",
        "1000 B",
        "1 KiB",
        "1.5 KiB",
        "360 KiB",
        "4.5 MiB",
        "1 GiB",
        "1073741825 B",
    ]
    assert size_sweep(4 << 10, 1 << 20) == [4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20]
    assert size_sweep(3, 100, 3) == [3, 9, 27, 81]


def test_relaunch_forwards_argv_untouched(tmp_path):
    """Every rank parses exactly the front end's command line, odd arguments included."""
    (tmp_path / "argv_probe.py").write_text(
        textwrap.dedent("""
        import json, os, sys
        rank = os.environ["MORI_RANK"]
        with open(os.path.join(os.environ["PROBE_DIR"], f"argv-{rank}.json"), "w") as f:
            json.dump(sys.argv[1:], f)
    """)
    )
    argv = [
        "--tokens",
        "1024",
        "4096",
        "--json",
        str(tmp_path / "a b.json"),
        "--",
        "-1",
        "x=y",
        "é",
        "",
        f"--seed={random.randrange(10**9)}",
    ]
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
        PROBE_DIR=str(tmp_path),
    )
    assert relaunch("argv_probe", argv, 2, env=env) == 0
    for rank in (0, 1):
        assert json.loads((tmp_path / f"argv-{rank}.json").read_text()) == ["--worker", *argv]


def test_timing_warms_up_and_steps_each_call():
    calls, barriers = [], []
    times = each_call_seconds(
        lambda: calls.append(len(barriers)), iters=7, warmup=3, barrier=lambda: barriers.append(1)
    )
    assert len(times) == 7 and all(t >= 0 for t in times)
    assert calls == list(range(1, 11))  # every call, warm-up included, comes after its own barrier
    n = []
    assert mean_seconds(lambda: n.append(1), iters=5, warmup=2) >= 0 and len(n) == 7


def test_median_of_slowest_takes_each_iteration_s_slowest_rank():
    mine = [random.uniform(1, 2) for _ in range(9)]
    other = [random.uniform(0, 3) for _ in range(9)]  # the other rank's times, as a max-reduction sees them
    slowest = [max(a, b) for a, b in zip(mine, other)]
    assert median_of_slowest(mine, lambda v: [max(a, b) for a, b in zip(v, other)]) == sorted(slowest)[4]
    assert median_of_slowest(mine, list) == sorted(mine)[4]  # one rank: its own median


def test_recv_exact_reassembles_and_names_a_closed_peer():
    a, b = socket.socketpair()
    payload = os.urandom(1 << 20)

    def send() -> None:
        for i in range(0, len(payload), 70001):
            a.sendall(payload[i : i + 70001])
        a.sendall(payload[:5])
        a.close()

    t = threading.Thread(target=send)
    t.start()
    assert recv_exact(b, len(payload)) == payload
    view = memoryview(bytearray(16))
    with pytest.raises(ConnectionError, match=r"the socket baseline's peer closed the connection after 5 of 16 bytes"):
        recv_into_exact(b, view, "the socket baseline's peer")
    t.join()
    b.close()


def test_report_is_the_json_writer(tmp_path):
    rows = [{"size": human_size(s), "GBps": random.random()} for s in (4096, 1 << 20)]
    rep = Report("probe", ["size", "GBps"], rows=list(rows), meta={"pes": 2})
    path = rep.save(str(tmp_path / "sub" / "probe.json"), extra={"gpu": "none", "sm_put_grid_sweep": []})
    doc = json.loads(open(path).read())
    assert doc["benchmark"] == "probe" and doc["rows"] == rows and doc["meta"] == {"pes": 2}
    assert doc["gpu"] == "none" and doc["sm_put_grid_sweep"] == []
    assert {"date", "command", "settings", "machine"} <= set(doc)
    assert "MORI_JOB_SECRET" not in doc["settings"]


def test_mori_bench_lists_every_benchmark_and_variant():
    out = subprocess.run(
        [sys.executable, "-m", "mori.apps.cli", "bench", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert out.returncode == 0, out.stderr
    for b in BENCHES:
        assert f"    {b.name} " in out.stdout
        for v in b.variants:
            assert f"{b.name} {v.flag}" in out.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "mori.apps.cli", "bench", "nope"],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert bad.returncode == 2 and "invalid choice: 'nope'" in bad.stderr


@pytest.mark.parametrize(
    "argv,prog",
    [
        (["shmem"], "mori bench shmem"),
        (["shmem", "--gpu"], "mori bench shmem --gpu"),
        (["shmem", "--hosts", "2"], "mori bench shmem"),
        (["shmem-c"], "mori bench shmem-c"),
        (["ep"], "mori bench ep"),
        (["ccl"], "mori bench ccl"),
        (["io"], "mori bench io"),
        (["io", "--gpu"], "mori bench io --gpu"),
        (["umbp"], "mori bench umbp"),
        (["umbp", "--master"], "mori bench umbp --master"),
        (["umbp", "--distributed"], "mori bench umbp"),
        (["ir"], "mori bench ir"),
    ],
)
def test_each_benchmark_answers_help(argv, prog):
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as done:
        bench_main([*argv, "--help"])
    assert done.value.code == 0
    assert out.getvalue().startswith(f"usage: {prog}")
