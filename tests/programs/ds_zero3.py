# SPDX-License-Identifier: MIT
"""A real DeepSpeed ZeRO-3 training run on CPU, twice in one job: without and with
MORI's all-gather hook. Asserts bit-identical losses and final parameters, and that the hook
handled the parameter all-gathers. Launch: mori run -n 2 python ds_zero3.py
"""

from __future__ import annotations

import json
import os
import sys
import time

import torch

os.environ.setdefault("DS_ACCELERATOR", "cpu")
import deepspeed  # noqa: E402
import deepspeed.comm.torch  # noqa: E402,F401

# DeepSpeed's CPU backend JIT-builds a shared-memory all-reduce op (~30 s) that ZeRO-3's
# all-gathers never use; both runs skip it alike. (sys.modules: the package attribute
# `deepspeed.comm.torch` is shadowed by the torch module.)
sys.modules["deepspeed.comm.torch"].build_shm_op = lambda: None
T0 = time.time()


def log(what: str) -> None:
    if os.environ.get("DS_ZERO3_VERBOSE"):
        print(f"[{time.time() - T0:7.2f}s] {what}", file=sys.stderr, flush=True)


STEPS = 4
CONFIG = {
    "train_micro_batch_size_per_gpu": 4,
    "gradient_accumulation_steps": 1,
    "optimizer": {"type": "Adam", "params": {"lr": 1e-2, "torch_adam": True}},
    "zero_optimization": {
        "stage": 3,
        "stage3_param_persistence_threshold": 0,
        "reduce_bucket_size": 4096,
        "stage3_prefetch_bucket_size": 4096,
        "stage3_max_live_parameters": 8192,
    },
    "steps_per_print": 1000,
    "wall_clock_breakdown": False,
}


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        # odd sizes: partitions are padded, shards differ in layout
        self.a = torch.nn.Linear(61, 133)
        self.b = torch.nn.Linear(133, 47)
        self.c = torch.nn.Linear(47, 5)

    def forward(self, x):
        return self.c(torch.tanh(self.b(torch.relu(self.a(x)))))


def train() -> tuple[list[float], dict[str, torch.Tensor]]:
    torch.manual_seed(1234)
    with deepspeed.zero.Init(config_dict_or_path=CONFIG):
        net = Net()
    log("model built")
    engine, _, _, _ = deepspeed.initialize(model=net, model_parameters=net.parameters(), config=CONFIG)
    log("engine built")
    g = torch.Generator().manual_seed(99 + engine.global_rank)
    losses = []
    for _ in range(STEPS):
        x = torch.randn(4, 61, generator=g)
        y = torch.randn(4, 5, generator=g)
        loss = torch.nn.functional.mse_loss(engine(x), y)
        engine.backward(loss)
        engine.step()
        losses.append(loss.item())
        log(f"step {len(losses)}")
    params = {}
    for name, p in engine.module.named_parameters():
        with deepspeed.zero.GatheredParameters([p]):
            params[name] = p.detach().clone()
    engine.destroy()
    return losses, params


def main() -> int:
    deepspeed.init_distributed(dist_backend="gloo")
    import mori.apps.deepspeed as mds

    rank = torch.distributed.get_rank()
    base_losses, base_params = train()
    mds.install()
    hooked_losses, hooked_params = train()
    stats = mds.uninstall()
    assert deepspeed.comm.allgather_fn.__name__ == "allgather_fn", "uninstall did not restore allgather_fn"
    assert deepspeed.comm.all_gather_into_tensor.__name__ != "mori_all_gather_into_tensor"
    # A size cap below the largest shard: big all-gathers fall back to DeepSpeed's own path.
    mds.install(max_numel=2000)
    mixed_losses, mixed_params = train()
    mixed = mds.uninstall()
    for label, losses, params in (("hooked", hooked_losses, hooked_params), ("mixed", mixed_losses, mixed_params)):
        assert losses == base_losses, f"rank {rank}: {label} losses differ: {base_losses} vs {losses}"
        for name, p in base_params.items():
            q = params[name]
            assert torch.equal(p.view(torch.int32), q.view(torch.int32)), f"rank {rank}: {label} {name} differs"
    handled = sum(stats["handled"].values())
    assert handled >= STEPS and not stats["fallback"], f"rank {rank}: hook counters {stats}"
    assert sum(mixed["handled"].values()) > 0 and sum(mixed["fallback"].values()) > 0, f"mixed counters {mixed}"
    assert mixed["fallback_reasons"].keys() == {"over MORI_DEEPSPEED_MAX_NUMEL"}, mixed
    assert base_losses[-1] != base_losses[0], "training did not change the loss"
    print(f"rank {rank}: ds-zero3 ok " + json.dumps({"losses": hooked_losses, "stats": stats, "mixed": mixed}))
    torch.distributed.destroy_process_group()  # as PyTorch asks (gloo's threads at exit: see ds_builtin_mori.py)
    return 0


if __name__ == "__main__":
    sys.exit(main())
