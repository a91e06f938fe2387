# SPDX-License-Identifier: MIT
"""UCX's endpoint report, read by the one parser that the ucx transport (`mori info`) and
MORI-IO's UCX backend share. Text only: needs no UCX library."""

from __future__ import annotations

from mori._C import io as _io
from mori._C import ucx as _ucx

# ucp_ep_print_info's shape in UCX 1.13: "<resource index>:<transport>/<device>.<path index>".
REPORT = """#
# UCP endpoint
#
#               peer: <no debug data>
#                 lane[0]:  1:tcp/lo.0 md[0]                -> md[0]/tcp/sysdev[255] am am_bw#0 keepalive wireup
#                 lane[1]:  3:rc_mlx5/mlx5_0:1.0 md[1]      -> md[1]/ib/sysdev[255] rma_bw#0 amo
#                 lane[2]:  4:tcp/lo.1 md[0]                -> md[0]/tcp/sysdev[255] am_bw#1 rma
#                 lane[3]:  6:tcp/eth0.100.0 md[0]          -> md[0]/tcp/sysdev[255] rma_bw#1
#
#                 am_send: 0..<egr/short>..8185..<egr/zcopy>..20553..<rndv>..(inf)
"""


def test_lanes_merge_per_resource_with_their_roles():
    assert _ucx.parse_endpoint_lanes(REPORT) == [
        ("tcp/lo", ["am", "am_bw", "keepalive", "wireup", "rma"]),
        ("rc_mlx5/mlx5_0:1", ["rma_bw", "amo"]),
        ("tcp/eth0.100", ["rma_bw"]),  # a VLAN device keeps its dot; only the path index goes
    ]
    assert _ucx.describe_lanes(REPORT) == (
        "tcp/lo: am am_bw keepalive wireup rma; rc_mlx5/mlx5_0:1: rma_bw amo; tcp/eth0.100: rma_bw"
    )


def test_io_backend_reads_the_same_lanes():
    assert _io.ucx_lane_transports(REPORT) == ["tcp/lo", "rc_mlx5/mlx5_0:1", "tcp/eth0.100"]


def test_no_lanes():
    assert _ucx.parse_endpoint_lanes("# UCP endpoint\n#   peer: <no debug data>\n") == []
    assert _ucx.describe_lanes("") == ""
    assert _io.ucx_lane_transports("no lanes here") == []
