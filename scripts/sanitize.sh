#!/usr/bin/env bash
# Builds MORI with AddressSanitizer + UndefinedBehaviorSanitizer and runs the shmem suites
# (Python API, hostile-argument suite, OpenSHMEM C API), EP's CPU suite, IO's and UMBP's under it.
#
#   scripts/sanitize.sh                 # build (incremental) and run the default suites
#   scripts/sanitize.sh tests/ep        # ...or the pytest paths given
#
# The instrumented build lives apart from the normal one: its own virtual environment and
# CMake build folder under build/sanitize/ (ignored by git), so `pip install -e .` elsewhere is
# untouched. CUDA is left out (the sanitizers do not see device code; GPU tests skip anyway).
# Python itself is not instrumented, so libasan is preloaded into every process the tests start
# (LD_PRELOAD is inherited by `mori run`, oshrun and the ranks). Leak checking is off: CPython
# keeps objects alive at exit by design. Any ASan or UBSan report ends that process non-zero,
# which fails its test. docs/shmem.md says how long a run takes.
set -euo pipefail
cd "$(dirname "$0")/.."

OUT=build/sanitize
VENV=$OUT/venv
PY=${PYTHON:-python3}
SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"

start=$(date +%s)
if [ ! -x "$VENV/bin/python" ]; then
  # System site-packages give it numpy, torch, pytest and the build tools (scripts/setup.sh).
  $PY -m venv --system-site-packages "$VENV"
fi
"$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-build-isolation -e . \
  -C build-dir="$OUT/cmake" -C cmake.build-type=RelWithDebInfo \
  -C cmake.define.MORI_DISABLE_CUDA=ON \
  -C cmake.define.CMAKE_C_FLAGS="$SAN" -C cmake.define.CMAKE_CXX_FLAGS="$SAN" \
  -C cmake.define.CMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined" \
  -C cmake.define.CMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined"
built=$(date +%s)

ext=$("$VENV/bin/python" - <<'EOF'
import importlib.util
print(importlib.util.find_spec("mori._C").origin)
EOF
)
if ! grep -q libasan <<<"$(ldd "$ext")"; then  # not a pipe: grep -q would cut ldd off (pipefail)
  echo "sanitize.sh: $ext is not linked against libasan: the instrumented build did not take" >&2
  exit 1
fi

source scripts/env.sh
# libstdc++ too: loaded later by dlopen, ASan could not intercept __cxa_throw (CHECK failed at the first throw).
export LD_PRELOAD="$(gcc -print-file-name=libasan.so):$(gcc -print-file-name=libstdc++.so)"
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=0:halt_on_error=1:detect_odr_violation=0:allocator_may_return_null=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
# Sanitized ranks are slower and bigger: give the bootstrap more time.
export MORI_BOOTSTRAP_TIMEOUT=${MORI_BOOTSTRAP_TIMEOUT:-120}

# The setup must catch a real overflow: a put that reads past a 16-byte local array.
canary=$("$VENV/bin/python" -c "
import numpy as np, mori.shmem as sh
sh.init()
x, small = sh.zeros(4096, np.uint8), np.zeros(16, np.uint8)
sh.shmem_putmem(x.ctypes.data, small.ctypes.data, 4096, 0)
" 2>&1 || true)
# (ASan names it heap-buffer-overflow, or unknown-crash where a wide vector load crosses the redzone.)
if ! grep -Eq "AddressSanitizer: (heap-buffer-overflow|unknown-crash)" <<<"$canary"; then
  echo "sanitize.sh: a deliberate heap overflow went unreported; the sanitizers are not active:" >&2
  echo "$canary" | tail -5 >&2
  exit 1
fi

if [ $# -eq 0 ]; then
  set -- tests/shmem tests/hostile/test_memory_safety.py tests/hostile/test_fuzz_shmem.py tests/test_capi.py \
    tests/ep/test_ep.py
  if [ -d tests/io ]; then set -- "$@" tests/io; fi
  if [ -d tests/umbp ]; then set -- "$@" tests/umbp; fi
fi
status=0
"$VENV/bin/python" -m pytest -q -ra --timeout=900 -p no:cacheprovider "$@" || status=$?
end=$(date +%s)
echo "sanitize.sh: build $((built - start)) s, tests $((end - built)) s, exit $status"
exit $status
