# SPDX-License-Identifier: MIT
import mori.shmem as sh


def test_context_manager_finalizes():
    with sh.init() as session:
        assert session.my_pe == 0 and session.n_pes == 1
        assert sh.shmem_initialized()
    assert not sh.shmem_initialized()
