#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# A private redis-server (Debian's package, installed by scripts/setup.sh) on a free port in a tmp
# dir, for trying the UMBP master's Redis store by hand: prints its URI, runs until ^C.
#   scripts/umbp-redis-server.sh [--cluster]
#   UMBP_METADATA_BACKEND=redis UMBP_REDIS_URI=<printed uri> umbp_master 0.0.0.0:15558 9091
exec "${PYTHON:-python3}" -m mori.umbp.distributed.redis_server "$@"
