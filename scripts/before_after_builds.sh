#!/usr/bin/env bash
# Sourced by the GPU-host A/B scripts (gpu_umbp_ssd.sh, gpu_umbp_dist_builds.sh, gpu_io_builds.sh):
# two builds of MORI side by side, the tree at $BEFORE (or $BEFORE_SRC) and this tree, each
# installed with `pip install --target` (CUDA off) under $PREFIX, and a way to run a command in
# either. The caller sets ROOT (the repo), OUT and PY, then calls ab_begin; failures set rc to 1.

# The builds go under $ROOT/build/$1 (PREFIX); OUT is made and turned absolute; rc starts at 0;
# where STEPS (default "build run") names build, both trees are built (the script exits if one
# fails).
ab_begin() {
  PREFIX=$ROOT/build/$1
  mkdir -p "$OUT" "$PREFIX"
  OUT=$(cd "$OUT" && pwd)
  rc=0
  if [[ " $STEPS " == *" build "* ]]; then
    ab_build_both || exit 1
  fi
}

# True where STEPS names run and both builds are there (the script exits if not); the machine's
# CPUs and load go to $OUT/machine.txt.
ab_running() {
  [[ " $STEPS " == *" run "* ]] || return 1
  ab_check_builds || exit 1
  { date -u; nproc; uptime; } > "$OUT/machine.txt" 2>&1
}

# Runs a command ($3...) with build $1's mori, its output in log $2, whose first line says which
# mori ran; a failure sets rc and shows the log's end.
ab_logged() {
  local name=$1 log=$2
  shift 2
  ab_run_in "$name" $PY -S -c 'import mori; print("mori from", mori.__file__)' > "$log" 2>&1
  ab_run_in "$name" "$@" >> "$log" 2>&1 || { rc=1; echo "== $(basename "$log") failed"; tail -15 "$log"; }
}

# Builds source tree $2 into $PREFIX/$1; its log goes to $OUT/build-$1.log. AB_CUDA=1 builds
# the GPU code too (where the machine has nvcc), for GPU rows.
ab_build() {
  local name=$1 src=$2 start=$SECONDS cuda=-Ccmake.define.MORI_DISABLE_CUDA=ON
  [ "${AB_CUDA:-0}" = 1 ] && cuda=-Ccmake.define.MORI_DISABLE_CUDA=OFF
  rm -rf "$PREFIX/$name"
  env CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" $PY -m pip install -q --no-build-isolation --no-deps \
    --target "$PREFIX/$name" "$cuda" -C build-dir="$PREFIX/build-$name" "$src" \
    > "$OUT/build-$name.log" 2>&1
  local r=$?
  echo "== build $name: exit $r, $((SECONDS - start)) s"
  [ $r -eq 0 ] || { rc=1; tail -25 "$OUT/build-$name.log"; }
  return $r
}

# Builds "before" (from $BEFORE_SRC, else `git archive $BEFORE`) and "after" (this tree); with
# AB_PARALLEL=1 both at once (a many-core host).
ab_build_both() {
  local before_src
  if [ -n "${BEFORE_SRC:-}" ]; then
    before_src=$BEFORE_SRC
  else
    before_src=$PREFIX/src-before
    rm -rf "$before_src" && mkdir -p "$before_src"
    git -C "$ROOT" archive "$BEFORE" | tar -x -C "$before_src" ||
      { echo "no git here to take $BEFORE from: set BEFORE_SRC to a tree of it"; return 1; }
  fi
  if [ "${AB_PARALLEL:-0}" = 1 ]; then
    ab_build before "$before_src" &
    local pid=$! r
    ab_build after "$ROOT"
    r=$?
    wait $pid && return $r
    rc=1
    return 1
  fi
  ab_build before "$before_src" && ab_build after "$ROOT"
}

# Fails unless both builds are there, and where a mori is installed for $PY: the processes a
# benchmark starts (plain `python`, not `-S`) would import that one instead of the build's (an
# editable install's import hook goes before PYTHONPATH).
ab_check_builds() {
  local name where
  for name in before after; do
    [ -d "$PREFIX/$name/mori" ] || { echo "no $name build in $PREFIX: run STEPS=build first"; return 1; }
  done
  if where=$(cd "$PREFIX" && $PY -c 'import mori; print(mori.__file__)' 2>/dev/null); then
    echo "a mori is installed for $PY ($where): the runs' child processes would import it, not the builds;" \
      "uninstall it (pip uninstall mori) for the runs"
    return 1
  fi
}

# Runs a command with build $1's mori: from $PREFIX, `python -S` style, with PYTHONPATH the build,
# then what PYTHONPATH held (device_env.sh's wheels: its grpcio must win over the GPU image's
# older one, which refuses the modules its grpcio-tools generated), then the interpreter's
# site-packages, so that an editable install of mori there (its import hook goes first) cannot
# shadow the build in this process (its children: ab_check_builds).
ab_run_in() {
  local name=$1
  shift
  local site
  site=$($PY -c 'import sysconfig; p = sysconfig.get_paths(); print(p["purelib"] + ":" + p["platlib"])')
  (cd "$PREFIX" && PYTHONPATH="$PREFIX/$name${PYTHONPATH:+:$PYTHONPATH}:$site" "$@")
}
