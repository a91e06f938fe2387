# SPDX-License-Identifier: MIT
"""mori.io"""
