# SPDX-License-Identifier: MIT
"""The OpenSHMEM C API: C programs in tests/capi/ built with our oshcc and run on 1-8 PEs
through oshrun, `mori run` and mpirun. Each program checks exact values on data drawn
from a seed chosen here (printed on failure) and exits non-zero on the first mismatch."""

from __future__ import annotations

import os
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mori.core.ports import restartable_port

from harness import CAPI_PROGRAMS, check, job_env, mori_run, mpirun, pe_counts

CAPI = Path(__file__).parent / "capi"
PROGRAMS = [
    "rma",
    "amo",
    "sync",
    "coll",
    "legacy",
    "threads",
    "errors",
    "fair",
    "team_sync",
    "shmemx",
    "noexit",
    "generics_gen",
    "v16",
    "barrier",
    "runahead",
    "stage_parity",
    "idle",
]
# The conformance programs (one per defect of the conformance issue) run at these PE counts.
CONFORMANCE_PES = [1, 2, 3, 4, 8]


@pytest.fixture(scope="module")
def tools() -> dict:
    from mori.shmem.capi import paths

    p = paths()
    return {
        "oshcc": str(p.bin_dir / "oshcc"),
        "oshcxx": str(p.bin_dir / "oshc++"),
        "oshrun": str(p.bin_dir / "oshrun"),
        "include": p.include_dir,
    }


@pytest.fixture(scope="module")
def built(tools, capi_build) -> Path:
    return capi_build(PROGRAMS)


def _seed() -> str:
    return str(random.getrandbits(48))


def _oshrun(tools: dict, n: int, prog: list[str], timeout: float = 90, env: dict | None = None):
    cmd = [tools["oshrun"], "-n", str(n), *prog]
    extra = {"MORI_PYTHON": sys.executable, **(env or {})}
    try:
        return subprocess.run(
            cmd, env=job_env(extra), stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"oshrun timed out after {timeout}s (a hang): {' '.join(cmd)}") from exc


@pytest.mark.parametrize("name", ["rma", "amo", "sync", "coll", "legacy", "threads"])
@pytest.mark.parametrize("n", [1, 2, 4, 8])
def test_program_oshrun(built, tools, name, n):
    seed = _seed()
    proc = _oshrun(tools, n, [str(built / name), seed])
    out = check(proc)
    assert f"{name}: OK on {n} PEs" in out, f"seed {seed}:\n{out[-3000:]}"


@pytest.mark.parametrize("name", ["coll", "rma", "amo", "sync", "legacy", "threads"])
def test_odd_pe_counts(built, name):
    """3 PEs: strided teams with odd sizes, ring neighbours that are not mutual."""
    seed = _seed()
    out = check(mori_run(3, [str(built / name), seed], timeout=90))
    assert f"{name}: OK on 3 PEs" in out, f"seed {seed}"


def test_single_pe_without_launcher(built):
    """shmem_init with no launcher variables is a job of one PE."""
    env = {k: v for k, v in job_env().items() if not k.startswith(("MORI_STORE", "OMPI_COMM", "PMI", "MASTER_ADDR"))}
    proc = subprocess.run([str(built / "legacy"), _seed()], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "legacy: OK on 1 PEs" in proc.stdout, proc.stdout + proc.stderr


def test_derived_secret_matches_python(built):
    """Without MORI_JOB_SECRET, a MASTER_ADDR/RANK job derives its secret from the address and
    port; the C API (rank 0, hosting the store) must derive exactly what mori.core.bootstrap does,
    or Python and C ranks of one job could not meet: a client holding the Python-derived secret
    is let in, one holding another secret is refused."""

    from mori import _C

    port = restartable_port()  # rank 0 binds it while the other rank may dial it
    launch = {
        "MASTER_ADDR": "127.0.0.1",
        "MORI_MASTER_PORT": str(port),
        "RANK": "0",
        "WORLD_SIZE": "2",
        "LOCAL_RANK": "1",
    }  # local rank 1: no warning on stderr
    env = {k: v for k, v in job_env(launch).items() if not k.startswith(("MORI_STORE", "MORI_JOB_SECRET", "OMPI_COMM"))}
    code = "from mori.core.bootstrap import detect_launch; print(detect_launch().secret_hex)"
    derived = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert derived.returncode == 0, derived.stderr
    secret = derived.stdout.strip().splitlines()[-1]
    rank0 = subprocess.Popen(
        [str(built / "legacy"), _seed()],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        with pytest.raises(Exception, match="(?i)refus|secret|auth"):
            _C.core.StoreClient("127.0.0.1", port, "ab" * 32, 1, 30)
        client = _C.core.StoreClient("127.0.0.1", port, secret, 1, 30)  # raises if the secrets differ
        del client
    finally:
        rank0.kill()
        out = rank0.communicate(timeout=30)[0]
    assert "OK" not in out, out  # rank 0 was still waiting for rank 1: the check above ran against it


def _holds_data_segment(pid: int) -> bool:
    """Whether PE `pid` has created its symmetric data segment: a /dev/shm object (before memfd)
    or a memory file among its descriptors."""
    if any(name.startswith(f"mori-data-{pid}-") for name in os.listdir("/dev/shm")):
        return True
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except FileNotFoundError:
        return False
    for fd in fds:
        try:
            if "mori-data" in os.readlink(f"/proc/{pid}/fd/{fd}"):
                return True
        except OSError:
            pass
    return False


def test_pe_killed_during_init_leaves_nothing_in_dev_shm(built):
    """A PE killed while shmem_init shares its globals (its peer is slow to map them) must not
    leave the data segment in /dev/shm: it is a memory file, gone with its last user."""
    import signal
    import time

    strace = shutil.which("strace")
    if strace is None:
        pytest.skip("strace is not installed (scripts/setup.sh installs it)")
    port = restartable_port()  # rank 0 binds it while the other rank may dial it
    before = set(os.listdir("/dev/shm"))
    base = {
        "MASTER_ADDR": "127.0.0.1",
        "MORI_MASTER_PORT": str(port),
        "WORLD_SIZE": "2",
        "MORI_BOOTSTRAP_TIMEOUT": "20",
    }
    env = {k: v for k, v in job_env(base).items() if not k.startswith(("MORI_STORE", "OMPI_COMM"))}
    seed = _seed()
    pe0 = subprocess.Popen(
        [str(built / "legacy"), seed],
        env={**env, "RANK": "0", "LOCAL_RANK": "0"},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    # PE 1's ftruncate calls (its heap's, then its data segment's) take 1.5 s each, so PE 0 sits
    # in shmem_init holding its data segment, waiting for PE 1 to map it.
    pe1 = subprocess.Popen(
        [
            strace,
            "-f",
            "-o",
            os.devnull,
            "-e",
            "trace=ftruncate",
            "-e",
            "inject=ftruncate:delay_enter=1500000",
            str(built / "legacy"),
            seed,
        ],
        env={**env, "RANK": "1", "LOCAL_RANK": "1"},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while not _holds_data_segment(pe0.pid):
            assert pe0.poll() is None, f"PE 0 exited ({pe0.returncode}) before creating its data segment"
            assert time.monotonic() < deadline, "PE 0 never created its data segment"
            time.sleep(0.005)
        pe0.send_signal(signal.SIGKILL)
        pe0.wait(timeout=30)
        pe1.wait(timeout=60)  # it fails on the lost PE 0
    finally:
        for p in (pe0, pe1):
            if p.poll() is None:
                p.kill()
                p.wait()
    leaked = sorted(name for name in set(os.listdir("/dev/shm")) - before if name.startswith("mori"))
    assert not leaked, f"left in /dev/shm: {leaked}"


def test_mpirun_bootstrap(built):
    """Started by Open MPI's mpirun, shmem_init bootstraps over MPI (libmpi loaded at run time)."""
    if shutil.which("mpirun") is None:
        pytest.skip("mpirun is not installed")
    seed = _seed()
    out = check(mpirun(2, [str(built / "amo"), seed], timeout=90))
    assert "amo: OK on 2 PEs" in out, f"seed {seed}"


def test_global_exit_status_passes_through(built, tools):
    proc = _oshrun(tools, 3, [str(built / "errors"), "exit"])
    assert proc.returncode == 99, proc.stdout + proc.stderr


@pytest.mark.parametrize("case, fn", [("pe", "shmem_long_p"), ("addr", "shmem_long_put")])
def test_bad_input_ends_job_naming_the_call(built, tools, case, fn):
    proc = _oshrun(tools, 3, [str(built / "errors"), case], timeout=60)
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0, text
    assert "shmem error on PE" in text and fn in text, text
    assert ("out of range" if case == "pe" else "not symmetric") in text, text


@pytest.mark.parametrize("case", ["stop", "stop_active"])
@pytest.mark.parametrize("n", pe_counts(3, also=[5]))  # 5: 12 s of CI; the same waits as 3
def test_stopped_peer_times_out_naming_it(built, tools, case, n):
    """The last PE stops (SIGSTOP) before a barrier; with MORI_SHMEM_WAIT_TIMEOUT the others'
    barrier ends in an error that names the PE they waited for, and the job ends."""
    proc = _oshrun(tools, n, [str(built / "errors"), case], timeout=120, env={"MORI_SHMEM_WAIT_TIMEOUT": "2"})
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0, text
    fn = "shmem_barrier_all" if case == "stop" else "shmem_barrier"
    assert re.search(rf"shmem error on PE [0-{n - 2}]: {fn}:", text), text  # whichever survivor reports first
    assert "waited 2.0 s (MORI_SHMEM_WAIT_TIMEOUT=2)" in text, text
    assert f"not arrived: PE {n - 1}\n" in text, text  # exactly the stopped one


def test_dead_peer_fails_barrier_naming_it(built, tools):
    proc = _oshrun(tools, 4, [str(built / "errors"), "dead"], timeout=120)
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0, text
    assert re.search(r"shmem error on PE [0-2]: shmem_barrier_all:", text), text
    assert "PE 3 (pid" in text and "exited without finalizing" in text, text


def test_unsatisfied_wait_until_times_out_saying_what(built, tools):
    proc = _oshrun(tools, 2, [str(built / "errors"), "wait"], timeout=120, env={"MORI_SHMEM_WAIT_TIMEOUT": "1.5"})
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0, text
    assert "shmem error on PE 0: shmem_long_wait_until:" in text, text
    # The deadline is checked between sleeps: on a loaded machine the report may come a little late.
    assert re.search(r"waited 1\.[5-9] s \(MORI_SHMEM_WAIT_TIMEOUT=1\.5\)", text) and "to become == 0x7" in text, text


def test_exhausted_heap_returns_null(built, tools):
    proc = _oshrun(tools, 2, [str(built / "errors"), "oom"], env={"MORI_SHMEM_HEAP_SIZE": "32M"})
    out = check(proc)
    assert "oom: NULL as expected" in out and "shmem_malloc" in out


def test_symmetric_size_env(built, tools):
    """SHMEM_SYMMETRIC_SIZE sets the heap when MORI_SHMEM_HEAP_SIZE is not given."""
    env = job_env({"SHMEM_SYMMETRIC_SIZE": "8M"})
    env.pop("MORI_SHMEM_HEAP_SIZE", None)
    prog = CAPI / "heapsize.c"
    exe = built / "heapsize"
    res = subprocess.run([tools["oshcc"], "-o", str(exe), str(prog)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    proc = subprocess.run([str(exe)], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(8 << 20), proc.stdout


def test_cplusplus_and_showme(tools, tmp_path):
    src = tmp_path / "hello.cc"
    src.write_text(
        "#include <shmem.h>\n#include <shmemx.h>\n#include <cstdio>\n"
        "int main() { shmem_init(); long* p = static_cast<long*>(shmem_malloc(8)); *p = shmem_my_pe();\n"
        "  if (shmem_sync(SHMEM_TEAM_WORLD) != 0) return 5;  // the 1.5 overload of the C++ header\n"
        '  shmem_barrier_all(); std::printf("cxx %ld %d\\n", shmem_long_g(p, 0), shmem_n_pes());\n'
        "  shmem_free(p); shmem_finalize(); return 0; }\n"
    )
    exe = tmp_path / "hello"
    res = subprocess.run(
        [tools["oshcxx"], "-std=c++20", "-Wall", "-Werror", "-o", str(exe), str(src)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    out = check(_oshrun(tools, 2, [str(exe)]))
    assert out.count("cxx 0 2") == 2, out
    show = subprocess.run([tools["oshcc"], "--showme"], capture_output=True, text=True, timeout=10).stdout
    assert "-lmori_shmem" in show and str(tools["include"]) in show


def test_v16_const_vectors_and_empty_team_config_from_cplusplus(tools, tmp_path):
    """Issue 29 item 18: a C++ caller passes const cmp_values to the six _vector wait/test
    routines (it did not compile), and shmem_team_get_config(team, 0, NULL) is 0 (it was -1)."""
    exe = tmp_path / "v16_const"
    res = subprocess.run(
        [tools["oshcxx"], "-std=c++17", "-Wall", "-Werror", "-o", str(exe), str(CAPI_PROGRAMS / "v16_const.cc")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    seed = _seed()
    out = check(_oshrun(tools, 3, [str(exe), seed]))
    assert "v16_const: OK on 3 PEs" in out, f"seed {seed}:\n{out[-3000:]}"


def test_generated_files_are_current():
    gen = Path(__file__).parents[1] / "shmem" / "codegen" / "gen_capi.py"
    res = subprocess.run([sys.executable, str(gen), "--check"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr


def _mix64(x: int) -> int:
    """check.h's splitmix64 step, to recompute what a C program stored."""
    m = (1 << 64) - 1
    x = (x + 0x9E3779B97F4A7C15) & m
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & m
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & m
    return x ^ (x >> 31)


def _rnd(seed: int, tag: int, pe: int, i: int) -> int:
    return _mix64(seed ^ _mix64((tag << 48) ^ (pe << 32) ^ i))


def _fair_unmasks_an_int_satisfied_element(seed: int, n: int) -> bool:
    """Whether fair.c, run with `seed` on `n` PEs, takes its rare branch on some PE: no long
    element satisfied, so it unmasks the first that holds 2, and that one's int is nonzero too
    (the int waits must then hand it out; CI met the branch once in about 200 runs at 8 PEs)."""
    for me in range(n):
        left = (me + n - 1) % n
        status = [_rnd(seed, 3, me, i) % 5 == 0 for i in range(24)]
        theirs = [1 + _rnd(seed, 1, left, i) % 3 for i in range(24)]
        if any(not status[i] and theirs[i] == 2 for i in range(24)):
            continue
        first = next((i for i in range(24) if theirs[i] == 2), None)
        if first is not None and status[first] and _rnd(seed, 2, left, first) % 4 != 0:
            return True
    return False


def test_fair_where_it_unmasks_an_element(built, tools):
    """fair.c's rare branch, on a seed drawn until it is taken: an element unmasked for the long
    waits is unmasked for the int waits too, so they may hand it out."""
    rng = random.Random()
    seed = next(s for s in iter(lambda: rng.getrandbits(48), None) if _fair_unmasks_an_int_satisfied_element(s, 8))
    out = check(_oshrun(tools, 8, [str(built / "fair"), str(seed)], timeout=180))
    assert "fair: OK on 8 PEs" in out, f"seed {seed}:\n{out[-3000:]}"


@pytest.mark.parametrize("name", ["fair", "team_sync", "shmemx", "generics_gen", "v16", "stage_parity"])
@pytest.mark.parametrize("n", CONFORMANCE_PES)
def test_conformance_program(built, tools, name, n):
    """fair: _any waits hand out every satisfied index in turn; team_sync: shmem_sync(team);
    shmemx: HAVE_SHMEMX_* macros; generics_gen: every C11 generic with every type of its table;
    v16: the OpenSHMEM 1.6 routines; stage_parity: staged collectives after a subset's and
    after a team that used the slot before."""
    seed = _seed()
    out = check(_oshrun(tools, n, [str(built / name), seed], timeout=180))
    label = "generics" if name == "generics_gen" else name
    assert f"{label}: OK on {n} PEs" in out, f"seed {seed}:\n{out[-3000:]}"


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_idle_pes_sleep_until_rung(built, tools, transport):
    """4 PEs on 2 cores: while PE 0 computes for a second, the PEs waiting for it in a barrier
    (world and team) sleep at most 150 times each (they sleep until the barrier's signal rings
    them; 2 ms naps woke each ~480 times) and spend at most 0.25 s of CPU (a busy-polling wait
    would spend the second), and the job's values stay exact."""
    seed = _seed()
    env = {"MORI_DISABLE_P2P": "1"} if transport == "tcp" else {}
    out = check(_oshrun(tools, 4, [str(built / "idle"), seed], timeout=60, env=env))
    assert "idle: OK on 4 PEs" in out, f"seed {seed}:\n{out[-3000:]}"


@pytest.mark.parametrize("n", CONFORMANCE_PES)
def test_small_collectives_run_ahead(built, tools, n):
    """Small collectives go without barriers (one message per pair through the inbox): PEs
    that run ahead of a lagging one, dest filled right before each call, sizes on both sides
    of the message limit, world / strided team / active set, every value exact."""
    seed = _seed()
    out = check(_oshrun(tools, n, [str(built / "runahead"), seed], timeout=240))
    assert f"runahead: OK on {n} PEs" in out, f"seed {seed}:\n{out[-3000:]}"


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 8])
def test_barrier_rounds(built, tools, n):
    """The barriers (same-host central barrier) over hundreds of rounds that mix barrier_all,
    active sets over all and over the even PEs, team_sync and fcollect on parity teams, with
    random arrival orders: nobody leaves before every member arrived, pSync is restored."""
    seed = _seed()
    out = check(_oshrun(tools, n, [str(built / "barrier"), seed], timeout=180))
    assert f"barrier: OK on {n} PEs" in out, f"seed {seed}:\n{out[-3000:]}"


@pytest.mark.parametrize("n", [3, 4])
def test_barrier_rounds_over_tcp(built, tools, n):
    """The same rounds with the PEs reaching each other over tcp (MORI_DISABLE_P2P=1): the
    dissemination barrier, which groups that do not share one host use."""
    seed = _seed()
    out = check(_oshrun(tools, n, [str(built / "barrier"), seed, "120"], timeout=180, env={"MORI_DISABLE_P2P": "1"}))
    assert f"barrier: OK on {n} PEs" in out, f"seed {seed}:\n{out[-3000:]}"


def test_shmemx_feature_macros_cover_every_extension(tools):
    """Every shmemx_ routine declared in shmemx.h has its HAVE_SHMEMX_<NAME> macro."""
    import re

    text = (Path(tools["include"]) / "shmemx.h").read_text()
    routines = set(re.findall(r"\b(shmemx_\w+)\s*\(", text))
    assert routines, text
    for r in sorted(routines):
        assert re.search(rf"#define HAVE_{r.upper()} 1", text), f"shmemx.h lacks HAVE_{r.upper()}"


@pytest.mark.parametrize(
    "how, n", [("return", 1), ("return", 2), ("exit", 3), ("mixed", 4), ("return", 8), ("mixed", 8)]
)
def test_exit_without_finalize_keeps_status_and_output(built, tools, how, n):
    """Leaving main (return or exit) without shmem_finalize finalizes at exit: the status
    passes through and every PE's buffered output arrives (it used to abort with 134)."""
    seed = random.getrandbits(48)
    status = random.choice([0, random.randint(1, 120), random.randint(1, 120)])
    proc = _oshrun(tools, n, [str(built / "noexit"), how, str(status), str(seed)], timeout=120)
    text = proc.stdout + proc.stderr
    assert proc.returncode == status, f"exit {proc.returncode}, expected {status}:\n{text[-3000:]}"
    assert "terminate called" not in text, text
    for pe in range(n):
        got = _rnd(seed, 1, (pe + n - 1) % n, 0) >> 8
        if got >= 1 << 63:
            got -= 1 << 64
        assert f"noexit PE {pe} got {got}" in proc.stdout, f"PE {pe}'s output is missing:\n{text[-3000:]}"


@pytest.mark.parametrize("how", ["link", "preload"])
@pytest.mark.parametrize("n", [1, 2, 3])
def test_profiling_interface_interposes_putmem(built, tools, tmp_path, n, how):
    """A tool library (linked before libmori_shmem, or LD_PRELOADed into an unchanged
    program) defines shmem_putmem/shmem_my_pe/shmem_pcontrol/shmem_finalize and forwards to
    pshmem_*: it sees exactly the program's calls (none while shmem_pcontrol(0) is in force,
    none made inside the library by _my_pe)."""
    tool = tmp_path / "libprofile_tool.so"
    res = subprocess.run(
        [
            tools["oshcc"],
            "-std=c11",
            "-Wall",
            "-Werror",
            "-shared",
            "-fPIC",
            "-o",
            str(tool),
            str(CAPI / "profile_tool.c"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    exe = tmp_path / "profile"
    link = [f"-L{tmp_path}", "-lprofile_tool", f"-Wl,-rpath,{tmp_path}"] if how == "link" else []
    res = subprocess.run(
        [tools["oshcc"], "-std=c11", "-Wall", "-Werror", "-o", str(exe), str(CAPI / "profile.c"), *link],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    seed = _seed()
    # After what is preloaded already (scripts/sanitize.sh puts libasan first, where it must be).
    preloaded = os.environ.get("LD_PRELOAD", "")
    env = {"LD_PRELOAD": f"{preloaded}:{tool}" if preloaded else str(tool)} if how == "preload" else None
    out = check(_oshrun(tools, n, [str(exe), seed], timeout=120, env=env))
    for pe in range(n):
        want = [ln.split(": ", 1)[1] for ln in out.splitlines() if ln.startswith(f"program PE {pe}: ")]
        seen = [ln.split(": ", 1)[1] for ln in out.splitlines() if ln.startswith(f"tool PE {pe}: ")]
        assert len(want) == 1 and seen == want, f"seed {seed}, PE {pe}: tool saw {seen}, program made {want}\n{out}"


def test_pshmem_names_are_exported(tools):
    """Every routine is exported under both names, at the same address (nm -D)."""
    from mori.shmem.capi import paths

    lib = paths().lib_dir / "libmori_shmem.so"
    res = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    addr = {}
    for line in res.stdout.splitlines():
        parts = line.split()
        if len(parts) == 3:
            addr[parts[2]] = parts[0]
    names = [s for s in addr if s.startswith(("shmem_", "shmemx_"))]
    assert len(names) > 1500, len(names)
    for s in names + ["start_pes", "_my_pe", "shmalloc"]:
        assert addr.get("p" + s) == addr[s], f"{s} at {addr.get(s)}, p{s} at {addr.get('p' + s)}"


def test_v16_bad_stride_names_the_argument(built, tools):
    proc = _oshrun(tools, 2, [str(built / "v16"), _seed(), "badstride"], timeout=90)
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0, text
    assert "shmem_long_ibput" in text and "dst must be >= 1" in text, text


def test_v16_pe_quiet_names_the_bad_target(built, tools):
    proc = _oshrun(tools, 2, [str(built / "v16"), _seed(), "badquiet"], timeout=90)
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0, text
    assert "shmem_pe_quiet" in text and "target_pes[1] (4)" in text, text


@pytest.mark.parametrize("n", [2, 3])
def test_v16_over_tcp(built, tools, n):
    """The 1.6 routines with the PEs reaching each other over tcp, where _nbi puts really are
    asynchronous: pe_quiet must complete them before the flag that follows."""
    seed = _seed()
    out = check(_oshrun(tools, n, [str(built / "v16"), seed], timeout=120, env={"MORI_DISABLE_P2P": "1"}))
    assert f"v16: OK on {n} PEs" in out, f"seed {seed}"


@pytest.fixture(scope="module")
def asan_program(tools, tmp_path_factory) -> Path:
    exe = tmp_path_factory.mktemp("capi_asan") / "asan"
    res = subprocess.run(
        [
            tools["oshcc"],
            "-std=c11",
            "-g",
            "-O1",
            "-fsanitize=address",
            "-fno-omit-frame-pointer",
            "-Wall",
            "-Werror",
            "-o",
            str(exe),
            str(CAPI / "asan.c"),
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    if res.returncode != 0 and "asan" in res.stderr:
        pytest.skip(f"no AddressSanitizer runtime: {res.stderr[-300:]}")
    assert res.returncode == 0, res.stderr
    return exe


@pytest.mark.parametrize("n", [1, 2, 3])
def test_program_built_with_asan(asan_program, tools, n):
    """-fsanitize=address programs: shmem_init copies data+bss (redzones included) without
    tripping ASan's memcpy checks, and RMA on globals works (issue: it aborted at init)."""
    seed = _seed()
    proc = _oshrun(tools, n, [str(asan_program), "plain", seed], timeout=120)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "AddressSanitizer" not in text, f"seed {seed}:\n{text[-4000:]}"
    assert f"asan: OK on {n} PEs" in proc.stdout, text[-3000:]


def test_asan_still_catches_global_overflow(asan_program, tools):
    """The remapped globals keep their ASan shadow: a read past a global array is reported."""
    proc = _oshrun(tools, 2, [str(asan_program), "overflow", _seed()], timeout=120)
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "global-buffer-overflow" in text, text[-4000:]
