#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/fuzz_*.cpp; clang, ASan + UBSan over every library)
# into $OSCAR_BUILD-fuzz and runs each for --seconds N (default 10) from its seeds: the
# committed ones (fuzz/corpus/<target>/), the project's test files of that format
# (tests/data), and every earlier finding kept as a regression (tests/data/fuzz/<target>/).
# A crash, a leak, a UBSan report, a timeout or a failed expectation fails the script,
# leaving the input in $OSCAR_BUILD-fuzz/findings/. A summary line per target gives the
# executions, the coverage and the corpus size.
#   bash scripts/fuzz.sh [--seconds N] [--runs N] [target ...]
# With both, each target stops at whichever comes first (the long runs: 10^7 executions
# or one CPU-hour).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/env.sh"
cd "$here/.."
seconds=
runs=()
targets=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    --runs) runs=(-runs="$2"); shift 2 ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) targets+=("$1"); shift ;;
  esac
done
all=(gguf safetensors torch_pt tokenizer chat_template rotation_manifest request)
[[ ${#targets[@]} -gt 0 ]] || targets=("${all[@]}")
# No limit given: a 10-s smoke. --runs alone: no time limit (libFuzzer's 0).
[[ -n $seconds ]] || { [[ ${#runs[@]} -gt 0 ]] && seconds=0 || seconds=10; }
source "$here/sanitized_build.sh"
build="$sanitized_build"
sanitized_build_targets "${targets[@]/#/fuzz_}"

# Seeds per target: directories (their files) and single files, the crafted bad files
# (tests/data/crafted/) among them.
seeds_for() {
  case "$1" in
    gguf) echo tests/data/quant_fixture.gguf tests/data/crafted/*.gguf ;;
    safetensors) echo tests/data/tiny_llama_st/model.safetensors tests/data/crafted/st_*/model.safetensors ;;
    torch_pt) echo tests/data/pt tests/data/pt/hostile tests/data/pt/rotation tests/data/pt/rotation_str_keys \
                   tests/data/crafted/pt_*/k_rotation_*.pt ;;
    *) ;;
  esac
  [[ -d fuzz/corpus/$1 ]] && echo "fuzz/corpus/$1"
  [[ -d tests/data/fuzz/$1 ]] && echo "tests/data/fuzz/$1"
  return 0
}
max_len_for() {
  case "$1" in gguf) echo 65536 ;; safetensors|torch_pt) echo 16384 ;; *) echo 4096 ;; esac
}

mkdir -p "$build/findings"
export ASAN_OPTIONS="detect_leaks=1:allocator_may_return_null=1:abort_on_error=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
failed=0
for t in "${targets[@]}"; do
  work="$build/corpus/$t"
  mkdir -p "$work"
  seeds=()
  for s in $(seeds_for "$t"); do
    if [[ -d $s ]]; then find "$s" -maxdepth 1 -type f -exec cp -n {} "$work/" \; ; else cp -n "$s" "$work/seed-$(echo "$s" | tr '/' '_')"; fi
  done
  dict=()
  [[ $t == request || $t == rotation_manifest ]] && dict=(-dict=fuzz/json.dict)
  log="$build/findings/$t.log"
  t0=$(date +%s)
  set +e
  # The fuzzer's own CPU seconds (user + system), beside the wall time: a long run on
  # shared cores gets less than its wall clock.
  TIMEFORMAT='%U %S'
  { time "$build/fuzz_$t" "$work" ${dict[@]+"${dict[@]}"} -max_total_time="$seconds" ${runs[@]+"${runs[@]}"} \
      -max_len="$(max_len_for "$t")" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=1024 -print_final_stats=1 \
      -artifact_prefix="$build/findings/$t-" > "$log" 2>&1 ; } 2> "$log.cpu"
  rc=$?
  set -e
  cpu=$(awk '{printf "%.0f", $1 + $2}' "$log.cpu" 2>/dev/null || echo '?')
  n_runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')
  cov=$(grep -oE 'cov: [0-9]+' "$log" | tail -1 | grep -oE '[0-9]+' || echo '?')
  corpus=$(find "$work" -type f | wc -l)
  if [[ $rc -ne 0 ]]; then
    failed=1
    echo "fuzz_$t: FAILED (exit $rc) after $n_runs runs; input in $build/findings/; log $log:"
    grep -E "ERROR|runtime error|expectation failed|Test unit written|deadly signal" "$log" | head -8
  else
    echo "fuzz_$t: ok, $n_runs runs in $(( $(date +%s) - t0 )) s ($cpu CPU-s), coverage $cov edges, corpus $corpus inputs"
  fi
done
exit $failed
