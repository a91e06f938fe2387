#!/usr/bin/env bash
# Builds libmori with ThreadSanitizer and runs MORI-IO's multi-threaded stress program under it
# (tests/io/native/io_thread_stress.cc: several threads moving and checking bytes over the tcp
# backend with every way of waiting for a status, then a target dropped mid-transfer).
#
#   scripts/tsan.sh [seconds] [threads] [tcp|ucx]     # default 20 s, 6 threads, tcp
#
# ucx: MORI-IO's RDMA backend on UCX over tcp (MORI_IO_RDMA_TRANSPORT=ucx, UCX_TLS=tcp,self,
# MORI_IO_DIRECT=0 are set); UCX itself is not instrumented.
#
# C++ alone, no Python: CPython is not instrumented, and the engine's threads (the caller's,
# the lanes' receiving threads, the target's connection threads) are all in libmori. The
# build lives in build/tsan/ (ignored by git; CUDA left out). Any data race or lock-order
# report ends the run non-zero. docs/io.md says what a run found and how long it took.
set -euo pipefail
cd "$(dirname "$0")/.."

OUT=build/tsan
SECONDS_RUN=${1:-20}
THREADS=${2:-6}
BACKEND=${3:-tcp}
if [ "$BACKEND" = ucx ]; then
  # No memory hooks: UCX's madvise hook runs at thread exit, after ThreadSanitizer has let go
  # of the thread, and crashes there.
  export MORI_IO_RDMA_TRANSPORT=ucx UCX_TLS=${UCX_TLS:-tcp,self} MORI_IO_DIRECT=0 UCX_MEM_EVENTS=no
fi
TSAN="-fsanitize=thread -fno-omit-frame-pointer"

start=$(date +%s)
cmake -S . -B "$OUT" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMORI_DISABLE_CUDA=ON \
  -DCMAKE_C_FLAGS="$TSAN" -DCMAKE_CXX_FLAGS="$TSAN" \
  -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=thread" ${CMAKE_ARGS:-} > "$OUT.configure.log" 2>&1 ||
  { tail -20 "$OUT.configure.log"; exit 1; }
cmake --build "$OUT" --target mori -j "$(nproc)" > "$OUT.build.log" 2>&1 || { tail -30 "$OUT.build.log"; exit 1; }
lib=$(dirname "$(find "$OUT" -name 'libmori.so' -print -quit)")
${CXX:-g++} -std=c++20 -O1 -g $TSAN -Iio/include -Icore/include tests/io/native/io_thread_stress.cc \
  -L"$lib" -lmori -Wl,-rpath,"$PWD/$lib" -pthread -o "$OUT/io_thread_stress"
built=$(date +%s)

# halt_on_error: the first report fails the run (exit 66), with both threads' stacks.
status=0
TSAN_OPTIONS="halt_on_error=1 exitcode=66 second_deadlock_stack=1 ${TSAN_OPTIONS:-}" \
  "$OUT/io_thread_stress" "$SECONDS_RUN" "$THREADS" "$BACKEND" || status=$?
end=$(date +%s)
echo "tsan.sh: build $((built - start)) s, run $((end - built)) s, exit $status"
exit $status
