# SPDX-License-Identifier: MIT
"""mori.apps: the mori command line, benchmarks and integrations."""
