# SPDX-License-Identifier: MIT
"""Launch parameters: MANUAL (call arguments over config defaults) or AUTO
(``MORI_EP_LAUNCH_CONFIG_MODE=AUTO``: rules from JSON files in MORI's tuning format).

A rule file is named ``{arch}_{model}_{KernelType}_ep{N}_{phase}.json`` and holds
``{"version", "gpu_arch", "gpu_model", "kernel_type", "ep_size", "phase", "rules": [...]}``;
each rule has ``dtype``, ``num_tokens``, ``hidden_dim`` and optionally ``topk`` (and, for
combine, ``zero_copy`` and ``quant_type``), plus the chosen ``block_num``,
``rdma_block_num`` and ``warp_per_block``. Files are searched in ``MORI_EP_TUNING_CONFIG``
(a file), else in this package's ``tuning_configs/`` folder.
"""

from __future__ import annotations

import json
import platform
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import torch

from mori.ep.kernel_type import EpDispatchCombineKernelType as K

TUNING_DIR = Path(__file__).parent / "tuning_configs"

# MORI's fallback when AUTO finds no rule: (block_num, rdma_block_num, warp_per_block).
AUTO_FALLBACK = {K.InterNodeV1: (96, 64, 8), K.InterNodeV1LL: (256, 128, 8)}
AUTO_FALLBACK_DEFAULT = (128, 0, 16)

_DTYPE_NAMES = {
    torch.bfloat16: "bf16",
    torch.float32: "fp32",
    torch.float16: "fp16",
    torch.float8_e4m3fnuz: "fp8_e4m3_fnuz",
    torch.float8_e4m3fn: "fp8_e4m3",
}


def dtype_rule_name(dtype: torch.dtype) -> str:
    if dtype in _DTYPE_NAMES:
        return _DTYPE_NAMES[dtype]
    if "float4" in str(dtype):
        return "fp4"
    return str(dtype).replace("torch.", "")


def device_arch_model(device: torch.device) -> tuple[str, str]:
    """("sm90", "h200") on a GPU; ("cpu", machine) on the host."""
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        name = torch.cuda.get_device_name(device).lower()
        model = next((m for m in ("h200", "h100", "h20", "h800", "b200", "a100") if m in name), name.split()[-1])
        return f"sm{major}{minor}", model
    return "cpu", platform.machine().lower()


@dataclass
class RuleSet:
    path: Path
    rules: list
    phase: str = ""


def find_rule_file(arch: str, model: str, kernel: K, ep: int, phase: str, explicit: str = "") -> Optional[Path]:
    """MORI's search: the explicit file, else the exact name, else any model of the same arch."""
    if explicit:
        p = Path(explicit)
        if not p.is_file():
            raise FileNotFoundError(f"MORI_EP_TUNING_CONFIG={explicit!r} is not a file")
        return p
    exact = TUNING_DIR / f"{arch}_{model}_{kernel.name}_ep{ep}_{phase}.json"
    if exact.is_file():
        return exact
    if TUNING_DIR.is_dir():
        for p in sorted(TUNING_DIR.glob(f"{arch}_*_{kernel.name}_ep{ep}_{phase}.json")):
            return p
    return None


def load_rules(path: Path, phase: str) -> RuleSet:
    data = json.loads(path.read_text())
    if not isinstance(data, dict) or not isinstance(data.get("rules"), list):
        raise ValueError(f"{path}: a tuning file holds an object with a 'rules' list")
    for i, r in enumerate(data["rules"]):
        for key in ("dtype", "num_tokens", "block_num", "warp_per_block"):
            if key not in r:
                raise ValueError(f"{path}: rule {i} has no {key!r}")
    return RuleSet(path, data["rules"], str(data.get("phase", "")))


def select_rule(
    rules: list,
    dtype: str,
    num_tokens: int,
    hidden_dim: int,
    topk: int,
    zero_copy: Optional[bool] = None,
    quant_type: Optional[str] = None,
) -> Optional[dict]:
    """Exact dtype (and zero_copy/quant_type when the rule names them); prefer the exact
    hidden size, then the exact top-k; the smallest num_tokens >= N, else the largest."""
    cands = [r for r in rules if r["dtype"] == dtype]
    if zero_copy is not None:
        cands = [r for r in cands if "zero_copy" not in r or bool(r["zero_copy"]) == zero_copy]
    if quant_type is not None:
        cands = [r for r in cands if "quant_type" not in r or r["quant_type"] == quant_type]
    if not cands:
        return None
    same_hidden = [r for r in cands if r.get("hidden_dim") == hidden_dim]
    cands = same_hidden or cands
    same_topk = [r for r in cands if r.get("topk") == topk]
    cands = same_topk or cands
    cands.sort(key=lambda r: r["num_tokens"])
    for r in cands:
        if r["num_tokens"] >= num_tokens:
            return r
    return cands[-1]


class LaunchConfigurator:
    """Resolves (block_num, rdma_block_num, warp_per_block) for one op."""

    def __init__(self, kernel: K, world_size: int, topk: int, mode: str, explicit_file: str = ""):
        mode = (mode or "MANUAL").upper()
        if mode not in ("MANUAL", "AUTO"):
            raise ValueError(f"invalid MORI_EP_LAUNCH_CONFIG_MODE {mode!r}: must be 'MANUAL' or 'AUTO'")
        self.mode, self.kernel, self.world_size, self.topk = mode, kernel, world_size, topk
        self.explicit_file = explicit_file
        self._rules: dict[tuple, Optional[RuleSet]] = {}

    def _ruleset(self, device: torch.device, phase: str) -> Optional[RuleSet]:
        arch, model = device_arch_model(device)
        key = (arch, model, phase)
        if key not in self._rules:
            path = find_rule_file(arch, model, self.kernel, self.world_size, phase, self.explicit_file)
            rs = load_rules(path, phase) if path else None
            # An explicit file holds one phase; the other phase falls back.
            if rs is not None and rs.phase not in ("", phase):
                rs = None
            self._rules[key] = rs
        return self._rules[key]

    def resolve(
        self,
        phase: str,
        device: torch.device,
        dtype: torch.dtype,
        num_tokens: int,
        hidden_dim: int,
        block_num: int,
        rdma_block_num: int,
        warp_per_block: int,
        zero_copy: Optional[bool] = None,
        quant_type: Optional[str] = None,
    ) -> tuple[int, int, int]:
        if self.mode == "MANUAL":
            return block_num, rdma_block_num, warp_per_block
        rs = self._ruleset(device, phase)
        if rs is not None:
            rule = select_rule(
                rs.rules,
                dtype_rule_name(dtype),
                num_tokens,
                hidden_dim,
                self.topk,
                zero_copy if phase == "combine" else None,
                quant_type if phase == "combine" else None,
            )
            if rule is not None:
                return int(rule["block_num"]), int(rule.get("rdma_block_num", 0)), int(rule["warp_per_block"])
        return AUTO_FALLBACK.get(self.kernel, AUTO_FALLBACK_DEFAULT)


def mode_from_env() -> tuple[str, str]:
    """(MORI_EP_LAUNCH_CONFIG_MODE, MORI_EP_TUNING_CONFIG) through the native env table."""
    from mori import _C

    return _C.ep.launch_config_mode(), _C.ep.tuning_config_path()
