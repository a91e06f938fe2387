# SPDX-License-Identifier: MIT
"""mori.collectives"""
