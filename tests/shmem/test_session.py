# SPDX-License-Identifier: MIT
import mori.shmem as sh


def test_context_manager_finalizes():
    with sh.init() as session:
        assert session.my_pe == 0 and session.n_pes == 1
        assert sh.shmem_initialized()
    assert not sh.shmem_initialized()


def test_barrier_on_stream_is_a_host_barrier_on_cpu_pes(tmp_path):
    """MORI's shmem_barrier_on_stream on CPU PEs: a barrier of all PEs, not an error (issue 14)."""
    import sys

    from harness import check, mori_run

    prog = tmp_path / "bos.py"
    prog.write_text(
        "import numpy as np, mori.shmem as sh\n"
        "from mori.shmem import gpu\n"
        "with sh.init():\n"
        "    me, n = sh.my_pe(), sh.n_pes()\n"
        "    x = sh.zeros(4, dtype=np.int64)\n"
        "    for r in range(20):\n"
        "        sh.put(x, np.full(4, 100 * r + me, dtype=np.int64), pe=(me + 1) % n)\n"
        "        gpu.shmem_barrier_on_stream()\n"
        "        assert (x == 100 * r + (me - 1) % n).all(), (r, x)\n"
        "        gpu.shmem_barrier_on_stream()\n"
        "    print('ok', me)\n"
    )
    out = check(mori_run(3, [sys.executable, str(prog)], timeout=120))
    assert out.count("ok") == 3
