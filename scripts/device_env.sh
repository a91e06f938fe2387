# Sourced at the start of a GPU machine's `run` call that carries `.devdeps` and `.whl` (what
# scripts/device_carry.sh gathers): unpacks them under /tmp and exports what a build and the
# benchmarks need there (grpc++, protobuf and hiredis, liburing, `ip`, redis-server, xxHash,
# grpcio and Mooncake).
#   source scripts/device_env.sh && python3 -m pip install --no-build-isolation --no-deps -e .
# A second source in the same call does nothing; a machine lent afresh unpacks again.
_mori_dev_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
_mori_dev_g=/tmp/grpcpp-root
_mori_dev_u=$_mori_dev_root/.devdeps/uring/usr
if [ ! -e /tmp/site/.mori-device-env ]; then
  mkdir -p "$_mori_dev_g" /tmp/site &&
    tar xJf "$_mori_dev_root/.devdeps/grpcpp-root.tar.xz" -C "$_mori_dev_g" &&
    sed -i "s|@ROOT@|$_mori_dev_g|" "$_mori_dev_g"/usr/lib/x86_64-linux-gnu/pkgconfig/*.pc &&
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site "$_mori_dev_root"/.whl/*.whl &&
    tar xJf "$_mori_dev_root/.devdeps/mooncake-site.tar.xz" -C /tmp/site &&
    touch /tmp/site/.mori-device-env ||
    echo "device_env.sh: unpacking .devdeps/.whl failed (were they carried?)" >&2
fi
export PKG_CONFIG_PATH=$_mori_dev_g/usr/lib/x86_64-linux-gnu/pkgconfig
export PATH=$_mori_dev_root/.devdeps/ip/bin:$_mori_dev_root/.devdeps/redis/bin:$PATH
export LD_LIBRARY_PATH=$_mori_dev_g/usr/lib/x86_64-linux-gnu:$_mori_dev_u/lib/x86_64-linux-gnu:$_mori_dev_root/.devdeps/ip/lib:$_mori_dev_root/.devdeps/redis/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
export CMAKE_ARGS="-DXXHASH_INCLUDE_DIR=$_mori_dev_root/.devdeps/include -DLIBURING_INCLUDE_DIR=$_mori_dev_u/include -DLIBURING_LIBRARY=$_mori_dev_u/lib/x86_64-linux-gnu/liburing.so.2 -DUMBP_PROTOC=$_mori_dev_g/usr/bin/protoc ${CMAKE_ARGS:-}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# The "before" tree of the A/B scripts, where the call carries one (no .git travels).
if [ -f "$_mori_dev_root/.devdeps/src-before.tar.xz" ] && [ -z "${BEFORE_SRC:-}" ]; then
  mkdir -p /tmp/src-before && tar xJf "$_mori_dev_root/.devdeps/src-before.tar.xz" -C /tmp/src-before &&
    export BEFORE_SRC=/tmp/src-before
fi
unset _mori_dev_root _mori_dev_g _mori_dev_u
