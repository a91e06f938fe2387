# SPDX-License-Identifier: MIT
"""mori.ep"""
