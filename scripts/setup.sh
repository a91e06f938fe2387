#!/usr/bin/env bash
# Installs what MORI needs on a fresh Debian machine and builds it in place (pip install -e .).
# Idempotent: re-running only rebuilds what changed.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" != "0" ] && command -v sudo >/dev/null; then SUDO="sudo"; fi

need_apt=""
command -v mpirun >/dev/null || need_apt="$need_apt openmpi-bin libopenmpi-dev"
command -v ip >/dev/null || need_apt="$need_apt iproute2"
command -v cmake >/dev/null || need_apt="$need_apt cmake"
command -v g++ >/dev/null || need_apt="$need_apt g++"
[ -f /usr/include/openssl/hmac.h ] || need_apt="$need_apt libssl-dev"   # HMAC (core/auth)
command -v strace >/dev/null || need_apt="$need_apt strace"   # a test delays one PE's init (tests/test_capi.py)
[ -f /usr/include/ucp/api/ucp.h ] || need_apt="$need_apt libucx-dev"   # UCX headers (transports/ucx; libucp is dlopened)
command -v ucx_info >/dev/null || need_apt="$need_apt ucx-utils"
[ -f /usr/include/xxhash.h ] || need_apt="$need_apt libxxhash-dev"     # UMBP value checksums (XXH3)
[ -f /usr/include/liburing.h ] || need_apt="$need_apt liburing-dev"    # UMBP SSD tier (io_uring)
command -v redis-server >/dev/null || need_apt="$need_apt redis-server"   # UMBP master metadata store (tests start a real one)
[ -f /usr/include/grpcpp/grpcpp.h ] || need_apt="$need_apt libgrpc++-dev"   # the UMBP master's gRPC server in C++
command -v protoc >/dev/null || need_apt="$need_apt protobuf-compiler"   # ... and its BatchRouteGet in C++ (umbp.pb.cc)
[ -f /usr/include/google/protobuf/message.h ] || need_apt="$need_apt libprotobuf-dev"
[ -f /usr/include/hiredis/hiredis.h ] || need_apt="$need_apt libhiredis-dev"   # the UMBP master's Redis get path in C++
if [ -n "$need_apt" ]; then
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q $need_apt
fi

PY=${PYTHON:-python3}
# torch 2.13.0 is the CPU build this machine kind carries locally; any torch >= 2.3 works.
$PY -m pip install -q --disable-pip-version-check \
  "numpy>=1.24" msgpack rich "pybind11>=3.0" "scikit-build-core>=0.10" ninja \
  mpi4py pytest pytest-timeout pytest-mpi hypothesis "torch==2.13.0"
if [ -f scripts/requirements-extra.txt ]; then
  $PY -m pip install -q --disable-pip-version-check -r scripts/requirements-extra.txt
fi
$PY -m pip install -q --disable-pip-version-check --no-build-isolation -e .
echo "mori installed: $($PY -c 'import mori; print(mori.__version__)')"
