#!/usr/bin/env bash
# Every GPU test of the repository in one run on a machine with 2+ NVLink-connected GPUs: build,
# then the GPU heap / device API tests, the GPU collectives and MORI-EP on CUDA (no benchmarks).
# Logs go to $OUT/results.tgz (default OUT: bench-results/). NVLink multicast stays off.
exec env STEPS=tests bash "$(dirname "$0")/gpu_bench.sh" "$@"
