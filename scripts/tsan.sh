#!/usr/bin/env bash
# Builds libmori and the OpenSHMEM C API with ThreadSanitizer and runs the multi-threaded
# programs under it:
#   - MORI-IO: tests/io/native/io_thread_stress.cc (threads moving and checking bytes with
#     every way of waiting for a status, registration churn, a target dropped mid-transfer),
#     on the tcp backend, the same-host direct path and UCX;
#   - MORI-UMBP's local store: tests/umbp/native/umbp_thread_stress.cc (threads putting and
#     getting values over a small DRAM tier that keeps evicting to the SSD tier), in the store
#     itself and through two clients of a per-host server holding it;
#   - the C API at SHMEM_THREAD_MULTIPLE: tests/capi/threads.c (threads doing RMA and AMOs on
#     the default context, then on private contexts), 2 and 4 PEs over shm, tcp and ucx-all.
#
#   scripts/tsan.sh [seconds] [threads]     # the stress programs' length and threads (20 s, 6)
#
# C and C++ alone, no Python in the instrumented processes (CPython is not instrumented; `mori
# run` only launches the C API's PEs). UCX is not instrumented and its memory hooks are turned
# off (UCX_MEM_EVENTS=no): its madvise hook runs as a thread exits, after ThreadSanitizer has
# let go of the thread, and crashes there. The build lives in build/tsan/ (ignored by git;
# CUDA left out). Any data race or lock-order report ends the run non-zero. docs/io.md says
# what a run found and how long it took.
set -euo pipefail
cd "$(dirname "$0")/.."

OUT=build/tsan
SECONDS_RUN=${1:-20}
THREADS=${2:-6}
TSAN="-fsanitize=thread -fno-omit-frame-pointer"
PY=${PYTHON:-python3}
export UCX_MEM_EVENTS=no
# halt_on_error: the first report fails the run (exit 66), with both threads' stacks.
export TSAN_OPTIONS="halt_on_error=1 exitcode=66 second_deadlock_stack=1 ${TSAN_OPTIONS:-}"

start=$(date +%s)
mkdir -p "$OUT"
cmake -S . -B "$OUT" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMORI_DISABLE_CUDA=ON \
  -DCMAKE_C_FLAGS="$TSAN" -DCMAKE_CXX_FLAGS="$TSAN" \
  -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=thread" ${CMAKE_ARGS:-} > "$OUT.configure.log" 2>&1 ||
  { tail -20 "$OUT.configure.log"; exit 1; }
cmake --build "$OUT" --target mori mori_shmem -j "$(nproc)" > "$OUT.build.log" 2>&1 ||
  { tail -30 "$OUT.build.log"; exit 1; }
link=(-L"$OUT" -Wl,-rpath,"$PWD/$OUT" -pthread)
${CXX:-g++} -std=c++20 -O1 -g $TSAN -Iio/include -Icore/include tests/io/native/io_thread_stress.cc \
  -lmori "${link[@]}" -o "$OUT/io_thread_stress"
${CXX:-g++} -std=c++20 -O1 -g $TSAN -Iumbp/include -Iumbp -Icore/include tests/umbp/native/umbp_thread_stress.cc \
  -lmori "${link[@]}" -o "$OUT/umbp_thread_stress"
${CC:-gcc} -std=c11 -O1 -g $TSAN -Ishmem/include -Itests/capi tests/capi/threads.c \
  -lmori_shmem -lmori "${link[@]}" -o "$OUT/capi_threads"
built=$(date +%s)

# The sanitizer must catch a real race: two threads incrementing a plain global.
cat > "$OUT/canary.c" <<'EOF'
#include <pthread.h>
long shared;
static void* bump(void* arg) { for (int i = 0; i < 100000; ++i) shared++; return arg; }
int main(void) {
  pthread_t a, b;
  pthread_create(&a, 0, bump, 0); pthread_create(&b, 0, bump, 0);
  pthread_join(a, 0); pthread_join(b, 0);
  return 0;
}
EOF
${CC:-gcc} -O1 -g $TSAN "$OUT/canary.c" -pthread -o "$OUT/canary"
if "$OUT/canary" > "$OUT/canary.log" 2>&1 || ! grep -q "ThreadSanitizer: data race" "$OUT/canary.log"; then
  echo "tsan.sh: a deliberate data race went unreported; ThreadSanitizer is not active" >&2
  exit 1
fi

status=0
have_ucx=1
for backend in tcp cma ucx; do
  echo "== io_thread_stress $SECONDS_RUN s, $THREADS threads, $backend"
  if [ "$backend" = ucx ]; then
    env MORI_IO_RDMA_TRANSPORT=ucx UCX_TLS=${UCX_TLS:-tcp,self} MORI_IO_DIRECT=0 \
      "$OUT/io_thread_stress" "$SECONDS_RUN" "$THREADS" ucx || { r=$?; [ $r -eq 3 ] && have_ucx=0 || status=$r; }
  else
    "$OUT/io_thread_stress" "$SECONDS_RUN" "$THREADS" "$backend" || status=$?
  fi
done
for mode in local server; do
  echo "== umbp_thread_stress $SECONDS_RUN s, $THREADS threads, $mode"
  ssd=$(mktemp -d)
  "$OUT/umbp_thread_stress" "$ssd" "$SECONDS_RUN" "$THREADS" "$mode" || status=$?
  rm -rf "$ssd"
done
for transport in shm tcp ucx-all; do
  if [ "$transport" = ucx-all ] && [ $have_ucx = 0 ]; then
    echo "== capi threads over ucx-all: skipped, UCX cannot be loaded here"
    continue
  fi
  for n in 2 4; do
    echo "== capi threads, $n PEs, $transport"
    case $transport in
      shm) envs=() ;;
      tcp) envs=(MORI_DISABLE_P2P=1) ;;
      ucx-all) envs=(MORI_NET_TRANSPORT=ucx-all UCX_TLS=${UCX_TLS:-tcp,self}) ;;
    esac
    env "${envs[@]}" timeout 600 $PY -m mori.apps.cli run -n "$n" "$OUT/capi_threads" "$RANDOM" || status=$?
  done
done
end=$(date +%s)
echo "tsan.sh: build $((built - start)) s, runs $((end - built)) s, exit $status"
exit $status
