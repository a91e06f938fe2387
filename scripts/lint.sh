#!/usr/bin/env bash
# The tree's format and lint checks (CI runs them before the tests):
#   C/C++/CUDA: clang-format (.clang-format; generated files in .clang-format-ignore are
#               checked for width only), Python: ruff format + ruff check (pyproject's [tool.ruff]).
# `scripts/lint.sh --fix` rewrites the files instead. The tool versions are pinned: another
# clang-format or ruff formats differently.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
CLANG_FORMAT_VERSION=19.1.7
RUFF_VERSION=0.17.6
TOOLS=${MORI_LINT_TOOLS:-$PWD/build/lint-tools}
if [ ! -x "$TOOLS/bin/ruff" ] || [ ! -x "$TOOLS/bin/clang-format" ] \
   || ! "$TOOLS/bin/clang-format" --version | grep -q "$CLANG_FORMAT_VERSION" \
   || ! "$TOOLS/bin/ruff" --version | grep -q "$RUFF_VERSION"; then
  $PY -m venv "$TOOLS"
  "$TOOLS/bin/pip" install -q --disable-pip-version-check "clang-format==$CLANG_FORMAT_VERSION" "ruff==$RUFF_VERSION"
fi
fix=0
[ "${1:-}" = "--fix" ] && fix=1

mapfile -t generated < <(grep -v '^#' .clang-format-ignore | sed '/^$/d')
# The tracked sources (every source below the root, build/ aside, outside a git checkout).
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  list_sources() { git ls-files '*.c' '*.cc' '*.h' '*.cu' '*.cuh' '*.hpp'; }
else
  list_sources() {
    find . \( -path ./build -o -path ./.git \) -prune -o -type f \( -name '*.c' -o -name '*.cc' -o -name '*.h' \
      -o -name '*.cu' -o -name '*.cuh' -o -name '*.hpp' \) -print | sed 's|^\./||' | sort
  }
fi
mapfile -t cfiles < <(list_sources | grep -vxF -f <(printf '%s\n' "${generated[@]}"))
status=0
if [ $fix = 1 ]; then
  "$TOOLS/bin/clang-format" -i "${cfiles[@]}"
  $PY shmem/codegen/gen_capi.py
  "$TOOLS/bin/ruff" check --fix --quiet .
  "$TOOLS/bin/ruff" format --quiet .
  exit 0
fi
"$TOOLS/bin/clang-format" --dry-run --Werror "${cfiles[@]}" 2>/tmp/mori-clang-format.$$ || {
  grep -E '^[^ ].*: (error|warning):' /tmp/mori-clang-format.$$ | cut -d: -f1 | sort -u | sed 's/^/clang-format: /'
  echo "clang-format: run scripts/lint.sh --fix"; status=1; }
rm -f /tmp/mori-clang-format.$$
wide=$(awk 'length > 120 {print FILENAME ":" FNR; exit}' "${generated[@]}")
[ -z "$wide" ] || { echo "generated file wider than 120 columns: $wide (shmem/codegen/gen_capi.py wraps)"; status=1; }
"$TOOLS/bin/ruff" format --check --quiet . || { echo "ruff format: run scripts/lint.sh --fix"; status=1; }
"$TOOLS/bin/ruff" check --quiet . || status=1
[ $status = 0 ] && echo "lint: clean (clang-format $CLANG_FORMAT_VERSION, ruff $RUFF_VERSION)"
exit $status
