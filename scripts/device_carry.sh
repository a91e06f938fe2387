#!/usr/bin/env bash
# What the GPU machine's image lacks, gathered on a Debian 12 x86-64 host for its `run` calls'
# `carry` (the image: Ubuntu 24.04, glibc 2.39, no internet, no apt; Debian 12's libraries need
# glibc 2.34 at most). Into the repo's ignored folders (add them to .git/info/exclude once):
#   .devdeps/grpcpp-root.tar.xz  grpc++ 1.51, protobuf 3.21 (headers, libraries, protoc), their
#                                abseil/re2/c-ares, pkg-config files with prefix @ROOT@
#   .devdeps/uring/usr           liburing 2.3 (headers, library): the SSD tier's io_uring reads
#   .devdeps/ip/{bin,lib}        iproute2's `ip` and its libraries: network namespaces
#   .devdeps/redis/{bin,lib}     redis-server 7 and the libraries the image lacks (the UMBP
#                                master's Redis store; hiredis for its C++ get path is in grpcpp-root)
#   .devdeps/include/xxhash.h    xxHash's header
#   .whl/                        grpcio, grpcio-tools, protobuf (cp312; the image has grpcio but
#                                no grpcio-tools, which the build needs for the control plane's
#                                modules: without it the UMBP master and client do not import),
#                                redis (the Python client the Redis store's tests and bench use)
#   .devdeps/mooncake-site.tar.xz  Mooncake's CPU wheel unpacked for /tmp/site (see below; the
#                                carry's limit is 64 MiB with the tree)
# On the GPU machine, before building (a call's command):
#   G=/tmp/g; mkdir -p $G && tar xJf .devdeps/grpcpp-root.tar.xz -C $G &&
#   sed -i "s|@ROOT@|$G|" $G/usr/lib/x86_64-linux-gnu/pkgconfig/*.pc
#   U=$PWD/.devdeps/uring/usr
#   export PKG_CONFIG_PATH=$G/usr/lib/x86_64-linux-gnu/pkgconfig PATH=$PWD/.devdeps/ip/bin:$PATH \
#     LD_LIBRARY_PATH=$G/usr/lib/x86_64-linux-gnu:$U/lib/x86_64-linux-gnu:$PWD/.devdeps/ip/lib
#   python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
#   tar xJf .devdeps/mooncake-site.tar.xz -C /tmp/site; export PYTHONPATH=/tmp/site
#   CMAKE_ARGS="-DXXHASH_INCLUDE_DIR=$PWD/.devdeps/include -DLIBURING_INCLUDE_DIR=$U/include
#     -DLIBURING_LIBRARY=$U/lib/x86_64-linux-gnu/liburing.so.2 -DUMBP_PROTOC=$G/usr/bin/protoc
#     -DMORI_DISABLE_CUDA=ON" python3 -m pip install --no-build-isolation --no-deps -e .
# Usage: bash scripts/device_carry.sh   (needs apt-get download, pip download, zip, xz)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
mkdir -p .devdeps/include .devdeps/uring .devdeps/ip/bin .devdeps/ip/lib .whl

cd "$WORK"
apt-get download libgrpc++-dev libgrpc-dev libgrpc29 libgrpc++1.51 libabsl-dev libabsl20220623 libprotobuf-dev \
  libprotobuf32 libprotoc32 protobuf-compiler libre2-9 libre2-dev libc-ares2 libc-ares-dev zlib1g-dev \
  liburing-dev liburing2 libxxhash-dev libhiredis-dev libhiredis0.14 redis-tools liblzf1 libjemalloc2 >/dev/null
mkdir grpc uring xx redis
for f in *.deb; do
  case $f in
    liburing*) dpkg -x "$f" uring ;;
    libxxhash*) dpkg -x "$f" xx ;;
    redis-tools* | liblzf* | libjemalloc*) dpkg -x "$f" redis ;;
    *) dpkg -x "$f" grpc ;;
  esac
done
# grpc++: no static archives or docs; links that point outside the tree are made to point at the
# image's own libraries (zlib) or dropped (what nothing here needs).
rm -rf grpc/usr/share/doc grpc/usr/share/man grpc/usr/share/lintian
find grpc -name '*.a' -delete
L=grpc/usr/lib/x86_64-linux-gnu
rm -f "$L/libprotobuf-lite.so"
ln -sf /lib/x86_64-linux-gnu/libz.so.1 "$L/libz.so"
sed -i -e 's|^prefix=/usr$|prefix=@ROOT@/usr|' -e 's|^libdir=\${exec_prefix}/lib$|libdir=${prefix}/lib/x86_64-linux-gnu|' \
  -e 's|^libdir=/usr/lib/x86_64-linux-gnu|libdir=${prefix}/lib/x86_64-linux-gnu|' \
  -e 's|^includedir=/usr/include|includedir=${prefix}/include|' -e 's|^libdir=/usr/lib$|libdir=${prefix}/lib/x86_64-linux-gnu|' "$L"/pkgconfig/*.pc
tar cJf "$ROOT/.devdeps/grpcpp-root.tar.xz" -C grpc .
rm -rf "$ROOT/.devdeps/uring/usr" && cp -a uring/usr "$ROOT/.devdeps/uring/" && rm -rf "$ROOT/.devdeps/uring/usr/share"
for l in "$ROOT"/.devdeps/uring/usr/lib/x86_64-linux-gnu/liburing.so*; do
  [ -L "$l" ] && cp --remove-destination "$(readlink -f "$l")" "$l"
done
cp xx/usr/include/xxhash.h "$ROOT/.devdeps/include/"
# redis-server is redis-tools' redis-check-rdb under its other name (the binary looks at argv[0]).
mkdir -p "$ROOT/.devdeps/redis/bin" "$ROOT/.devdeps/redis/lib"
cp redis/usr/bin/redis-check-rdb "$ROOT/.devdeps/redis/bin/redis-server"
cp -L redis/usr/lib/x86_64-linux-gnu/liblzf.so.1 redis/usr/lib/x86_64-linux-gnu/libjemalloc.so.2 "$ROOT/.devdeps/redis/lib/"
cp /usr/sbin/ip "$ROOT/.devdeps/ip/bin/"
for l in $(ldd /usr/sbin/ip | awk '/=>/ {print $3}'); do
  case $(basename "$l") in libc.so.*|libz.so.*) ;; *) cp -L "$l" "$ROOT/.devdeps/ip/lib/" ;; esac
done

# Python wheels for the image's Python 3.12.
PLAT=(--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${PLAT[@]}" \
  -d "$ROOT/.whl" grpcio grpcio-tools protobuf redis
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${PLAT[@]}" \
  -d mc mooncake-transfer-engine-non-cuda
# Mooncake travels unpacked, as one xz tarball for /tmp/site (a third smaller than its wheel, and
# the tree grew past what the 64 MiB carry leaves): without its two unused binaries, and with
# mooncake/libetcd_wrapper.so, a 22 MB twin of the auditwheel copy in the .libs folder, linked to it.
rm -f "$ROOT"/.whl/mooncake*.whl
mkdir mcx && (cd mcx && unzip -q ../mc/*.whl && rm -f mooncake/transfer_engine_bench mooncake/mooncake_client &&
  etcd=$(cd mooncake_transfer_engine_non_cuda.libs && ls libetcd_wrapper-*.so) &&
  ln -sf "../mooncake_transfer_engine_non_cuda.libs/$etcd" mooncake/libetcd_wrapper.so &&
  tar cf - . | xz -T0 -6 > "$ROOT/.devdeps/mooncake-site.tar.xz")
du -sh "$ROOT/.devdeps" "$ROOT/.whl"
