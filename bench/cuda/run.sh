#!/usr/bin/env bash
# On a GPU machine, from the repo root: build the CUDA backend standalone (Release, into
# build-cuda/), run its tests (a GPU is required), compute-sanitizer memcheck on them, then
# the decode-attention benchmark, writing ${OUT:-.}/decode_attention_<date>.json, the memory
# floor of its history walk's copy pattern (${OUT:-.}/tma_walk_<date>.json), and the
# PyTorch SDPA baseline on the same shapes (${OUT:-.}/sdpa_baseline_<date>.json), then the
# end-to-end decode benchmark (DeviceModel at the Qwen3-8B shape, ${OUT:-.}/cuda_e2e_decode.json).
# A failed build or test stops the script (set -e); the sanitizer's verdict is recorded
# and printed but does not stop the benchmark.
set -euo pipefail

cd "$(dirname "$0")/../.."
out_dir="${OUT:-.}"
mkdir -p "$out_dir"
build_dir=build-cuda
generator=()
if command -v ninja >/dev/null 2>&1; then generator=(-G Ninja); fi

echo "== configure + build ($build_dir)"
if [ -f "$build_dir/CMakeCache.txt" ] && ! grep -q "CMAKE_HOME_DIRECTORY:INTERNAL=$(pwd)/src/oscar/cuda" "$build_dir/CMakeCache.txt"; then
  echo "$build_dir was configured from another source tree; reconfiguring from scratch"
  rm -rf "$build_dir"
fi
cmake -S src/oscar/cuda -B "$build_dir" -DCMAKE_BUILD_TYPE=Release ${generator[@]+"${generator[@]}"}
cmake --build "$build_dir" -j "$(nproc)"

# OSCAR_COMMIT first: the GPU machine's copy of the tree may carry a stale .git.
commit="${OSCAR_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv || true

echo "== tests"
# GPU-vs-CPU fixtures: written on the CPU by test_cuda_engine (build/cuda_fixtures), copied to
# .fixtures/ and carried here; without them that suite skips.
fixtures="${OSCAR_CUDA_FIXTURE_DIR:-.fixtures}"
if [ -d "$fixtures" ]; then export OSCAR_CUDA_FIXTURE_DIR="$fixtures"; else echo "no GPU-vs-CPU fixtures in $fixtures"; fi
OSCAR_REQUIRE_GPU=1 "$build_dir/oscar_cuda_tests"
echo "tests: PASS"

echo "== compute-sanitizer memcheck"
sanitizer="not run (compute-sanitizer not found)"
if [ -n "${OSCAR_SKIP_MEMCHECK:-}" ]; then
  sanitizer="skipped (OSCAR_SKIP_MEMCHECK)"
elif command -v compute-sanitizer >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/compute-sanitizer ]; then
  cs="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
  if OSCAR_REQUIRE_GPU=1 "$cs" --tool memcheck --error-exitcode 99 "$build_dir/oscar_cuda_tests"; then
    sanitizer="PASS"
  else
    sanitizer="FAIL (exit $?)"
  fi
fi
echo "memcheck: $sanitizer"

echo "== benchmark"
json="$out_dir/decode_attention_$(date +%F).json"
bench_rc=0
"$build_dir/bench_decode_attention" --json "$json" --commit "$commit" || bench_rc=$?

echo "== TMA walk floor (the history walk's copy pattern, no arithmetic)"
walk_json="$out_dir/tma_walk_$(date +%F).json"
walk_rc=0
"$build_dir/bench_tma_walk" --json "$walk_json" --commit "$commit" || walk_rc=$?

echo "== PyTorch SDPA baseline (BF16 KV)"
sdpa_json="$out_dir/sdpa_baseline_$(date +%F).json"
sdpa="not run (python3 has no torch)"
if python3 -c 'import torch' >/dev/null 2>&1; then
  if python3 bench/cuda/sdpa_baseline.py --json "$sdpa_json" --commit "$commit"; then sdpa="OK ($sdpa_json)"; else sdpa="FAIL (exit $?)"; fi
fi

echo "== end-to-end decode (DeviceModel, Qwen3-8B shape, random weights)"
e2e_json="$out_dir/cuda_e2e_decode.json"
e2e_rc=0
"$build_dir/bench_e2e_decode" --json "$e2e_json" --commit "$commit" || e2e_rc=$?

echo "== summary"
echo "commit:   $commit"
echo "tests:    PASS"
echo "memcheck: $sanitizer"
echo "bench:    $([ "$bench_rc" -eq 0 ] && echo "OK ($json)" || echo "FAIL (exit $bench_rc)")"
echo "walk:     $([ "$walk_rc" -eq 0 ] && echo "OK ($walk_json)" || echo "FAIL (exit $walk_rc)")"
echo "sdpa:     $sdpa"
echo "e2e:      $([ "$e2e_rc" -eq 0 ] && echo "OK ($e2e_json)" || echo "FAIL (exit $e2e_rc)")"
[ "$bench_rc" -eq 0 ] && [ "$walk_rc" -eq 0 ] && [ "$e2e_rc" -eq 0 ]
