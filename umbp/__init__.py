# SPDX-License-Identifier: MIT
"""mori.umbp: MORI-UMBP, the tiered KV-cache store (MORI's API)."""
