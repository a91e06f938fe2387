# SPDX-License-Identifier: MIT
"""``EpDispatchRoutingHandle``: one dispatch's layout, kept so that its combine (or a dispatch of
the same routing again) can run after other dispatches. Engines keep several layers in flight:

    out1, ..., recv1, h1 = op.dispatch(x1, w1, None, idx1, return_routing=True)
    out2, ..., recv2, h2 = op.dispatch(x2, w2, None, idx2, return_routing=True)
    op.combine(y2, w2o, idx2, routing=h2)
    op.combine(y1, w1o, idx1, routing=h1)           # any order
    op.dispatch(x1b, w1, None, idx1, routing=h1)      # the same rows land where they did for h1

MORI's fields; ours hold (see docs/ep.md): ``disp_dest_tok_id_map`` int64 ``[cur_rank_num_token *
topk]`` (destination PE x max_num_tokens_to_recv + slot, or -1), ``total_recv_token_num`` int32
``[1]``, ``disp_tok_id_to_src_tok_id_local`` int32 ``[max_num_tokens_to_recv]`` (the flat source
position of each received row); for InterNodeV1 ``inter_node_disp_send_map`` (uint8
``[cur_rank_num_token * nodes]``: the nodes each token visited) and ``inter_node_disp_dest_tok_id_map``
(int32: this PE's forwarding inbox, entry counts per node, then (source token, local-rank mask)
pairs, then the slot each entry took on each PE of this node, -1 for none: what a replay needs),
else both empty. The keyword-only ``indices`` keeps the routing the layout was made with,
so a call with another routing is refused rather than mis-combined.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import torch


@dataclass
class EpDispatchRoutingHandle:
    """Per-call routing snapshot from ``dispatch(..., return_routing=True)``, replayed by
    ``combine(..., routing=h)`` and ``dispatch(..., routing=h)``."""

    disp_dest_tok_id_map: torch.Tensor
    inter_node_disp_dest_tok_id_map: torch.Tensor
    inter_node_disp_send_map: torch.Tensor
    total_recv_token_num: torch.Tensor
    disp_tok_id_to_src_tok_id_local: torch.Tensor
    cur_rank_num_token: int = 0
    indices: Optional[torch.Tensor] = field(default=None, kw_only=True)

    def tensors(self) -> tuple:
        """The five tensors, in field order (what :meth:`from_tensors` takes back)."""
        return (
            self.disp_dest_tok_id_map,
            self.inter_node_disp_dest_tok_id_map,
            self.inter_node_disp_send_map,
            self.total_recv_token_num,
            self.disp_tok_id_to_src_tok_id_local,
        )

    @classmethod
    def from_tensors(cls, tensors, cur_rank_num_token: int = 0) -> "EpDispatchRoutingHandle":
        """A handle over these tensors (MORI's form; no ``indices``, so routings are not compared)."""
        return cls(*tensors, cur_rank_num_token=cur_rank_num_token)

    def source_token_count(self) -> int:
        """``cur_rank_num_token``, which must be set (> 0 for a handle made by hand, as in MORI)."""
        n = int(self.cur_rank_num_token)
        if n <= 0 and self.indices is None:
            raise ValueError(
                "routing handle has cur_rank_num_token <= 0; use a handle from "
                "dispatch(..., return_routing=True) or pass a positive cur_rank_num_token to "
                "EpDispatchRoutingHandle.from_tensors(...)"
            )
        return n
