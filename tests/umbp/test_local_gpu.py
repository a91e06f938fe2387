# SPDX-License-Identifier: MIT
"""The local store refuses GPU memory (skipped without CUDA): a device pointer is an argument
error naming the argument, never a crash, and nothing is written."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

from mori.umbp import UMBPClient, UMBPConfig

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(300)]


def test_device_pointers_are_refused() -> None:
    cfg = UMBPConfig()
    cfg.dram.capacity_bytes = 1 << 20
    cfg.ssd.enabled = False
    client = UMBPClient(cfg)
    dev = torch.randint(0, 256, (4096,), dtype=torch.uint8, device="cuda:0")
    host = np.random.default_rng(1).integers(0, 256, 4096, dtype=np.uint8)
    with pytest.raises(ValueError, match=r"put_from_ptr: src .* CUDA device 0"):
        client.put_from_ptr("g", dev.data_ptr(), 4096)
    with pytest.raises(ValueError, match=r"batch_put_from_ptr: ptrs\[1\] .* CUDA device 0"):
        client.batch_put_from_ptr(["h", "g"], [host.ctypes.data, dev.data_ptr()], [4096, 4096])
    assert client.batch_exists(["h", "g"]) == [False, False]
    assert client.put_from_ptr("h", host.ctypes.data, 4096)
    with pytest.raises(ValueError, match=r"get_into_ptr: dst .* CUDA device 0"):
        client.get_into_ptr("h", dev.data_ptr(), 4096)
    # Pinned host memory is host memory.
    pinned = torch.zeros(4096, dtype=torch.uint8).pin_memory()
    assert client.get_into_ptr("h", pinned.data_ptr(), 4096)
    assert np.array_equal(pinned.numpy(), host)
