# SPDX-License-Identifier: MIT
"""``mori.ops.tuning_config``: MORI's module of names for the AUTO launch rules
(``TuningConfigManager``, ``LaunchParams``, the name helpers), over :mod:`mori.ep.tuning`,
which owns the file search and the rule choice.

Rule files and the choice among rules are MORI's (see :mod:`mori.ep.tuning`); our arch and model
names are ``sm90``/``h200`` on a GPU and ``cpu``/the machine on the host.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Optional

import torch

from mori.core.env import setting
from mori.ep.kernel_type import EpDispatchCombineKernelType, QUANT_TYPES, normalize_quant_type
from mori.ep.tuning import TUNING_DIR, device_arch_model, dtype_rule_name, find_rule_file, load_rules, select_rule

SUPPORTED_VERSION = "1.0"

DTYPE_TO_CONFIG_STR: dict = {
    dt: dtype_rule_name(dt)
    for dt in (torch.bfloat16, torch.float32, torch.float16, torch.float8_e4m3fnuz, torch.float8_e4m3fn)
}
if hasattr(torch, "float4_e2m1fn_x2"):
    DTYPE_TO_CONFIG_STR[torch.float4_e2m1fn_x2] = dtype_rule_name(torch.float4_e2m1fn_x2)
CONFIG_STR_TO_DTYPE: dict = {v: k for k, v in DTYPE_TO_CONFIG_STR.items()}

_PHASES = ("dispatch", "combine")


def kernel_type_to_config_str(kernel_type: Any) -> str:
    """``"IntraNode"`` for ``EpDispatchCombineKernelType.IntraNode``, its name or its value."""
    name = getattr(kernel_type, "name", None) or str(kernel_type)
    if name in EpDispatchCombineKernelType.__members__:
        return name
    if isinstance(kernel_type, int) and not isinstance(kernel_type, bool):
        try:
            return EpDispatchCombineKernelType(kernel_type).name
        except ValueError:
            pass
    raise ValueError(
        f"Unknown kernel_type: {kernel_type!r}, expected one of {sorted(EpDispatchCombineKernelType.__members__)}"
    )


def quant_type_to_config_str(quant_type: Any) -> str:
    """The rule files' name of a combine quant type (``"none"``, ``"fp8_direct_cast"``, ...)."""
    if isinstance(quant_type, str) and quant_type.strip().lower() == "none_":
        return "none"
    try:
        q = normalize_quant_type(quant_type)
    except (ValueError, NotImplementedError):
        raise ValueError(f"Unknown quant_type: {quant_type!r}") from None
    return next(k for k, v in QUANT_TYPES.items() if v == q)


def dtype_to_config_str(dtype: torch.dtype) -> str:
    """``"bf16"``, ``"fp8_e4m3"``, ... (KeyError for a dtype the rule files do not name, as in MORI)."""
    return DTYPE_TO_CONFIG_STR[dtype]


def detect_gpu_model() -> Optional[str]:
    """This process's GPU model (``"h200"``), or None without a GPU."""
    if not torch.cuda.is_available():
        return None
    return device_arch_model(torch.device("cuda", torch.cuda.current_device()))[1]


def build_config_filename(
    gpu_arch: str, kernel_type: str, ep_size: int, gpu_model: Optional[str] = None, phase: str = "dispatch"
) -> str:
    """``{arch}_{model}_{kernel}_ep{n}_{phase}.json`` (no model part when ``gpu_model`` is None)."""
    parts = [gpu_arch] + ([gpu_model] if gpu_model else []) + [f"{kernel_type}_ep{ep_size}_{phase}"]
    return "_".join(parts) + ".json"


def config_path_for(
    gpu_arch: str, kernel_type: str, ep_size: int, gpu_model: Optional[str] = None, phase: str = "dispatch"
) -> Path:
    """``MORI_EP_TUNING_CONFIG`` when set, else the shipped file for (arch, model), else any model's
    of the same arch, kernel, EP size and phase; else the exact name (which does not exist)."""
    kernel = EpDispatchCombineKernelType[kernel_type_to_config_str(kernel_type)]
    explicit = str(setting("MORI_EP_TUNING_CONFIG"))
    if explicit:
        return Path(explicit)
    found = find_rule_file(gpu_arch, gpu_model or "", kernel, int(ep_size), phase)
    return (
        found
        if found is not None
        else TUNING_DIR / build_config_filename(gpu_arch, kernel.name, ep_size, gpu_model, phase)
    )


@dataclass(frozen=True)
class LaunchParams:
    """One rule's launch shape."""

    block_num: int
    rdma_block_num: int
    warp_per_block: int


class TuningConfigManager:
    """The dispatch and combine rules of one (arch, kernel type, EP size, model), loaded once."""

    _cache: ClassVar[dict] = {}

    def __init__(self, dispatch_rules: list, combine_rules: list):
        self.dispatch_rules = dispatch_rules
        self.combine_rules = combine_rules

    @classmethod
    def get_instance(
        cls, gpu_arch: str, kernel_type: str, ep_size: int, gpu_model: Optional[str] = None
    ) -> "TuningConfigManager":
        key = (gpu_arch, gpu_model or "", kernel_type_to_config_str(kernel_type), int(ep_size))
        if key not in cls._cache:
            rules = {}
            for phase in _PHASES:
                path = config_path_for(gpu_arch, kernel_type, ep_size, gpu_model, phase)
                rs = load_rules(path, phase) if path.is_file() else None
                rules[phase] = rs.rules if rs is not None and rs.phase in ("", phase) else []
            cls._cache[key] = cls(rules["dispatch"], rules["combine"])
        return cls._cache[key]

    @staticmethod
    def lookup(
        sorted_rules: list,
        dtype: torch.dtype,
        num_tokens: int,
        hidden_dim: int,
        zero_copy: Optional[bool] = None,
        quant_type: Optional[str] = None,
    ) -> Optional[LaunchParams]:
        """The rule for a call (exact dtype, zero_copy, quant_type; exact hidden preferred; the
        smallest ``num_tokens`` >= the call's, else the largest), or None."""
        if dtype not in DTYPE_TO_CONFIG_STR:
            return None
        rule = select_rule(
            sorted_rules, DTYPE_TO_CONFIG_STR[dtype], int(num_tokens), int(hidden_dim), 0, zero_copy, quant_type
        )
        if rule is None:
            return None
        return LaunchParams(int(rule["block_num"]), int(rule.get("rdma_block_num", 0)), int(rule["warp_per_block"]))

    @staticmethod
    def save_tuning_result(path: Any, metadata: dict, entry: dict, phase: str = "dispatch") -> None:
        """Merge one measured rule into a phase file: a rule with the same key (dtype, num_tokens,
        hidden_dim, and for combine zero_copy and quant_type) is replaced only by a higher
        ``bandwidth_gbps``. The file is replaced atomically."""
        if phase not in _PHASES:
            raise ValueError(f"save_tuning_result: phase must be one of {_PHASES}, got {phase!r}")
        path = Path(path)
        try:
            data = json.loads(path.read_text()) if path.is_file() else None
        except (OSError, json.JSONDecodeError):
            data = None
        if not isinstance(data, dict):
            data = {"version": SUPPORTED_VERSION, **metadata, "rules": []}
        rules = data.setdefault("rules", [])
        fields = ("dtype", "num_tokens", "hidden_dim") + (("zero_copy", "quant_type") if phase == "combine" else ())
        key = tuple(entry.get(f) for f in fields)
        same = [i for i, r in enumerate(rules) if tuple(r.get(f) for f in fields) == key]
        if not same:
            rules.append(entry)
        elif entry.get("bandwidth_gbps", 0) > rules[same[0]].get("bandwidth_gbps", 0):
            rules[same[0]] = entry
        rules.sort(
            key=lambda r: (
                str(r.get("dtype")),
                r.get("hidden_dim", 0),
                str(r.get("zero_copy", "")),
                str(r.get("quant_type", "")),
                r.get("num_tokens", 0),
            )
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=str(path.parent), prefix=path.stem, suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(data, f, indent=2)
                f.write("\n")
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
