# SPDX-License-Identifier: MIT
"""Launch multi-process jobs from pytest: `mori run`, `mpirun`, torch.multiprocessing, ranks
started straight from env vars, and programs driven by JSON lines (``ProgramPeer``).

Every launch has a timeout: a hang fails the test instead of stalling CI.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional, Sequence

from mori.core.ports import job_master_port

PROGRAMS = Path(__file__).parent / "programs"
CAPI_PROGRAMS = Path(__file__).parent / "capi"

# Open MPI as root, oversubscribed on a 2-core machine (reference/environment.md).
MPI_ENV = {
    "OMPI_ALLOW_RUN_AS_ROOT": "1",
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    "OMPI_MCA_rmaps_base_oversubscribe": "1",
    "OMPI_MCA_opal_common_ucx_opal_mem_hooks": "0",
}


def job_env(extra: Optional[dict] = None) -> dict:
    env = dict(os.environ)
    env.update(MPI_ENV)
    env.setdefault("MORI_SHMEM_HEAP_SIZE", "256M")
    env.setdefault("MORI_BOOTSTRAP_TIMEOUT", "60")
    env["PYTHONUNBUFFERED"] = "1"
    if extra:
        env.update(extra)
    return env


def _run(cmd: Sequence[str], timeout: float, env: Optional[dict]) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(
            list(cmd), env=job_env(env), stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"").decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        err = (exc.stderr or b"").decode(errors="replace") if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        raise AssertionError(
            f"job timed out after {timeout}s (a hang): {' '.join(cmd)}\n--- stdout\n{out}\n--- stderr\n{err}"
        ) from None


def mori_run(
    n: int, program: Sequence[str], timeout: float = 120, env: Optional[dict] = None, launcher_args: Sequence[str] = ()
) -> subprocess.CompletedProcess:
    """`mori run -n N program...`"""
    cmd = [sys.executable, "-m", "mori.apps.cli", "run", "-n", str(n), *launcher_args, "--", *program]
    return _run(cmd, timeout, env)


def mpirun(
    n: int, program: Sequence[str], timeout: float = 120, env: Optional[dict] = None
) -> subprocess.CompletedProcess:
    """`mpirun -n N program...` (Open MPI)."""
    exe = shutil.which("mpirun")
    if exe is None:
        import pytest

        pytest.skip("mpirun is not installed (scripts/setup-ci.sh installs Open MPI)")
    return _run([exe, "-n", str(n), *program], timeout, env)


def env_rank(rank: int, n: int, port: int, secret: Optional[str] = None, extra: Optional[dict] = None) -> dict:
    """The environment of rank ``rank`` of an ``n``-rank job started with no launcher, from
    MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE as torchrun would set them: rank 0 hosts the
    bootstrap store on ``port``."""
    env = {
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "RANK": str(rank),
        "WORLD_SIZE": str(n),
        "LOCAL_RANK": str(rank),
    }
    if secret:
        env["MORI_JOB_SECRET"] = secret
    return job_env({**env, **(extra or {})})


def start_rank(program: Sequence[str], env: dict, **popen_kw) -> subprocess.Popen:
    """One rank process, stdout and stderr together in ``.stdout``; end it with ``collect``."""
    return subprocess.Popen(
        list(program),
        env=env,
        text=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        **popen_kw,
    )


def start_env_ranks(
    n: int, program: Sequence[str], extra: Optional[dict] = None, secret: bool = True
) -> list[subprocess.Popen]:
    """``n`` ranks of ``program`` started straight from env vars (``env_rank``), on a free port
    pair (``job_master_port``: rank 0's store binds the next one) and with a fresh job secret
    (``secret=False``: none, the one-host derived secret): nothing stops the others when one dies."""
    port, secret_hex = job_master_port(), os.urandom(32).hex() if secret else None
    return [start_rank(program, env_rank(rank, n, port, secret_hex, extra)) for rank in range(n)]


def collect(procs: Sequence[subprocess.Popen], timeout: float) -> list[str]:
    """Each process's output once all have exited. One still running after ``timeout`` (a hang)
    is killed with the others and fails the test, naming it; none is left behind."""
    deadline = time.monotonic() + timeout
    outs = []
    try:
        for rank, p in enumerate(procs):
            try:
                outs.append(p.communicate(timeout=max(0.1, deadline - time.monotonic()))[0])
            except subprocess.TimeoutExpired:
                raise AssertionError(
                    f"rank {rank} (pid {p.pid}) still runs after {timeout} s (a hang); "
                    f"outputs so far:\n" + "\n".join(o[-2000:] for o in outs)
                ) from None
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return outs


def full_matrix() -> bool:
    """MORI_TEST_ALL_PE_COUNTS=1: the whole test matrix, also the rows whose code paths other rows
    already take (CI leaves them out, to stay within its 2 cores and 20 minutes)."""
    return os.environ.get("MORI_TEST_ALL_PE_COUNTS") == "1"


def pe_counts(*counts: int, also: Sequence[int] = ()) -> list[int]:
    """The PE counts a multi-process test runs at: ``counts`` always, and ``also`` (counts whose
    code paths the others already take) only in the full matrix (full_matrix())."""
    return sorted({*counts, *(also if full_matrix() else ())})


def gpu_pe_counts(device_count: int) -> list[int]:
    """PE counts of a multi-GPU test: 2, and every GPU of the machine when it has more; none (skip)
    with fewer than 2 GPUs. MORI_TEST_GPU_PES="2,8" names the counts instead, and then PEs may
    share GPUs (their kernels take turns on a shared GPU: a check of correctness, never of speed;
    EP8 and CCL8 protocols can so be tested on one GPU)."""
    named = os.environ.get("MORI_TEST_GPU_PES", "").strip()
    if named and device_count >= 1:
        return sorted({int(v) for v in named.split(",") if v.strip()})
    return sorted({2, device_count}) if device_count >= 2 else []


def python_program(name: str, *args: str) -> list[str]:
    return [sys.executable, str(PROGRAMS / name), *map(str, args)]


def check(proc: subprocess.CompletedProcess, expect_ok: bool = True) -> str:
    """Assert on the exit code; returns stdout+stderr for further checks. A failed job's message
    starts with the cases its rank programs reported failed (cases.py), if any, and ends with
    its command line (which holds the job's random seed, so the failure can be replayed)."""
    text = proc.stdout + proc.stderr
    if expect_ok and proc.returncode != 0:
        failed = [
            f"case {c['case']!r} failed on PE {c['pe']}: {c.get('error', '')}" for c in case_lines(text) if not c["ok"]
        ]
        summary = ": " + "; ".join(failed[:4]) if failed else ""
        cmd = " ".join(map(str, proc.args)) if isinstance(proc.args, (list, tuple)) else str(proc.args)
        raise AssertionError(f"job failed with code {proc.returncode}{summary}\n{text[-6000:]}\ncommand: {cmd[-1000:]}")
    return text


def build_capi_programs(names: Sequence[str], out: Path) -> Path:
    """Compiles tests/capi/NAME.c with our oshcc into `out` (warnings are errors); returns `out`."""
    from mori.shmem.capi import paths

    oshcc = str(paths().bin_dir / "oshcc")
    for name in names:
        opt = "-O0" if name == "generics_gen" else "-O1"  # 1400 generated cases: -O0 compiles 4x faster
        cmd = [
            oshcc,
            "-std=c11",
            opt,
            "-Wall",
            "-Werror",
            "-pthread",
            "-o",
            str(out / name),
            str(CAPI_PROGRAMS / f"{name}.c"),
            "-lm",
        ]
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, f"{' '.join(cmd)}\n{res.stderr}"
    return out


def build_native_program(source: Path, out: Path, includes: Sequence[Path]) -> Path:
    """Compiles a C++ test program (tests/*/native/) against the installed libmori into `out`;
    skips the test where there is no C++ compiler or no libmori."""
    import pytest

    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no C++ compiler")
    from mori.shmem.capi import paths

    lib = paths().lib_dir
    if not (lib / "libmori.so").exists():
        pytest.skip(f"no libmori.so in {lib}")
    cmd = [cxx, "-std=c++20", "-O1", "-g", "-Wall", "-Werror", *(f"-I{d}" for d in includes), str(source)]
    cmd += [f"-L{lib}", "-lmori", f"-Wl,-rpath,{lib}", "-pthread", "-o", str(out)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, f"{' '.join(cmd)}\n{res.stderr}"
    return out


def case_lines(text: str) -> list[dict]:
    """The JSON lines of tests/programs/cases.py in a job's output (launcher prefixes skipped)."""
    found = []
    for line in text.splitlines():
        start = line.find('{"case": ')
        if start < 0:
            continue
        try:
            found.append(json.loads(line[start:]))
        except json.JSONDecodeError:
            continue
    return found


def check_cases(proc: subprocess.CompletedProcess, n: int, cases: Sequence[str]) -> list[dict]:
    """Asserts every case passed on all ``n`` PEs. A failure names the case, the PE and its
    error (then the job's last lines), not the whole output. Returns the case lines."""
    text = proc.stdout + proc.stderr
    lines = case_lines(text)
    failed = [f"case {c['case']!r} failed on PE {c['pe']}: {c.get('error', '')}" for c in lines if not c["ok"]]
    passed = {(c["case"], c["pe"]) for c in lines if c["ok"]}
    missing = [f"{case!r} on PE {pe}" for case in cases for pe in range(n) if (case, pe) not in passed]
    if failed or missing or proc.returncode != 0:
        first = failed[:4] or [f"no result for {', '.join(missing[:6])}" if missing else "every case passed"]
        raise AssertionError(
            f"job failed with code {proc.returncode}: "
            + "; ".join(first)
            + f"\n--- last lines of the job\n{text[-2500:]}"
        )
    return lines


class ProgramPeer:
    """A program in another process driven by JSON lines: each command is one line on its stdin
    (``{"cmd": ..., **kw}``), each answer one line on its stdout; ``{"error": ...}`` (with an
    optional ``trace``) fails the test. A peer that does not answer within the timeout is
    killed and fails the test (a hang); one that dies is reported with its stderr."""

    def __init__(
        self, program: Sequence[str], name: str, env: Optional[dict] = None, prefix: Sequence[str] = ()
    ) -> None:
        full = dict(os.environ)
        full["PYTHONUNBUFFERED"] = "1"
        full.update(env or {})
        self.name = name
        self.proc = subprocess.Popen(
            [*prefix, *program],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=full,
            text=True,
        )

    def send(self, cmd: str, **kw) -> None:
        assert self.proc.stdin
        self.proc.stdin.write(json.dumps({"cmd": cmd, **kw}) + "\n")
        self.proc.stdin.flush()

    def answer(self, cmd: str, timeout: float = 60) -> dict:
        assert self.proc.stdout
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            self.kill()
            raise AssertionError(f"{self.name} did not answer '{cmd}' within {timeout} s (a hang)")
        line = self.proc.stdout.readline()
        if not line:
            err = self.proc.stderr.read() if self.proc.stderr else ""
            raise AssertionError(f"{self.name} died during '{cmd}':\n{err[-4000:]}")
        out = json.loads(line)
        if "error" in out:
            trace = f"\n{out['trace']}" if out.get("trace") else ""
            raise AssertionError(f"{self.name} failed '{cmd}': {out['error']}{trace}")
        return out

    def ask(self, cmd: str, timeout: float = 60, **kw) -> dict:
        self.send(cmd, **kw)
        return self.answer(cmd, timeout)

    def stderr_so_far(self) -> str:
        """What the program has written to stderr until now, without waiting for more (for a
        failed assertion's message while the program still runs)."""
        if not self.proc.stderr:
            return ""
        os.set_blocking(self.proc.stderr.fileno(), False)
        try:
            return self.proc.stderr.read() or ""
        except (BlockingIOError, TypeError):
            return ""
        finally:
            os.set_blocking(self.proc.stderr.fileno(), True)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=30)

    def close(self) -> None:
        """Asks the program to quit, then makes sure it has; its pipes are closed."""
        if self.proc.poll() is None:
            try:
                self.ask("quit", timeout=30)
            except AssertionError:
                pass
        self.kill()
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if f:
                f.close()
