#!/usr/bin/env bash
# CPU peer benchmark (issue 25): oscar against llama.cpp (the PyPI package llama-cpp-python, pinned in
# bench/peer_requirements.txt, compiled once into $OSCAR_VENV with AVX2/FMA/F16C) on the same GGUF,
# threads (2), prompt lengths and context, in one run. Measures, median of 3 repetitions with the
# engines interleaved:
#   prefill_512          prefill tokens/s of a 512-token prompt
#   decode_short         decode tokens/s after a 16-token prompt (128 tokens)
#   decode_after_4096    decode tokens/s of 32 tokens after a 4096-token prompt
#   decode_after_16384   the same after 16384 tokens (Qwen2.5 only)
# for llama.cpp with f16 and q8_0 KV (flash attention on) and oscar with bf16, int8 and int2-oscar
# KV; plus one `oscar run -c 4096` per KV mode on the eval text for peak RSS against file + KV bytes.
# One JSON file per model: bench/results/cpu_peer_<model>.json (model: smollm2, qwen25), with the
# machine, date, commit and command; a markdown table is printed. See bench/cpu_peer.py's header.
#
#   bench/cpu_peer.sh                SmolLM2-135M, then Qwen2.5-Coder-1.5B if its file is present
#   bench/cpu_peer.sh --no-qwen      SmolLM2 only
#   bench/cpu_peer.sh --only qwen25  one model (smollm2 or qwen25)
#   bench/cpu_peer.sh --quick        smoke run: short prompts, 1024-token depth, 2 repetitions, 16
#                                    tokens decoded; written to ${TMPDIR:-/tmp}/cpu_peer_<model>_quick.json
#   options: --reps N, --minutes M (the whole run's bound; default 90, quick 10), --step-minutes M (one
#            measurement's bound; default 60), --out-dir DIR
# Timing: SmolLM2 takes about 25 minutes on a quiet machine (3 repetitions). Qwen2.5 prefills at
# roughly 25-30 tokens/s here, so one 16384-token step takes about 10 minutes: at 16K only
# llama.cpp q8_0 and oscar int2-oscar run (OSCAR_PEER_DEEP_CONFIGS; empty: all five), and its memory
# run is int2-oscar's (OSCAR_PEER_MEM_KVS); one repetition takes about 45 minutes. OSCAR_PEER_DEPTHS overrides
# the depths (comma-separated; empty: the short plan only). Repetitions that
# would pass the bound are not started; a step past its bound fails and is listed; the JSON is
# rewritten after every step (status "partial") and on SIGTERM, so a stopped run keeps what it measured.
# On a shared machine every step first waits (up to 5 minutes) for other processes to quieten, and a
# sample during which they took over 10 % of the CPUs is run again (twice at most): llama.cpp's OpenMP
# threads slow down by 10-100x when a third process competes for the 2 cores.
# Environment: OSCAR_BIN (default $OSCAR_BUILD/oscar; copied once at the start, so a rebuild during
# the run changes nothing), OSCAR_BENCH_ARGS (appended to every measured oscar command, bench and run,
# e.g. "--weights native"), OSCAR_QWEN_MODEL (default $OSCAR_MODELS/Qwen2.5-Coder-1.5B-Instruct.Q4_K_M.gguf),
# and those of scripts/env.sh (OSCAR_MODEL, OSCAR_EVAL_TEXT, OSCAR_CALIB_TEXT, OSCAR_VENV, ...).
# int2-oscar uses the cached rotations of scripts/quickstart.sh (corpus), else the calib.txt fit, else the quick fit of
# bench/serve_cpu.sh, else calibrates that quick fit once (cached; speed does not depend on the fit).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here/.."
source scripts/env.sh
invoked="bench/cpu_peer.sh $*"
load_at_start="$(cut -d' ' -f1-3 /proc/loadavg)"

quick=0; no_qwen=0; only=""; reps=""; minutes=""; step_minutes=60; out_dir=bench/results
while [[ $# -gt 0 ]]; do
  case "$1" in
    --quick) quick=1; shift ;;
    --no-qwen) no_qwen=1; shift ;;
    --only) only="$2"; shift 2 ;;
    --reps) reps="$2"; shift 2 ;;
    --minutes) minutes="$2"; shift 2 ;;
    --out-dir) out_dir="$2"; shift 2 ;;
    --step-minutes) step_minutes="$2"; shift 2 ;;
    -h|--help) sed -n '2,35p' "$0"; exit 0 ;;
    *) echo "cpu_peer.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
if [[ $quick == 1 ]]; then
  reps=${reps:-2}; minutes=${minutes:-10}; [[ "$out_dir" == bench/results ]] && out_dir="${TMPDIR:-/tmp}"
else
  reps=${reps:-3}; minutes=${minutes:-90}
fi
threads=2
py="$OSCAR_VENV/bin/python"
start_s=$SECONDS
total_s=$(( minutes * 60 ))
budget_name=cpu_peer.sh
source bench/run_budget.sh
log_dir="$(mktemp -d "${TMPDIR:-/tmp}/cpu_peer.XXXXXX")"
trap 'exit 130' INT TERM

# 1. The peer, built once into the venv (as bench/serve_cpu.sh does).
[[ -x "$py" ]] || { echo "cpu_peer.sh: no venv at $OSCAR_VENV (run scripts/setup.sh)" >&2; exit 1; }
peer_note=""
if ! timeout 60 "$py" -c "import llama_cpp" 2>/dev/null; then
  echo "== installing the peer (bench/peer_requirements.txt; compiles llama.cpp, several minutes)" >&2
  t0=$SECONDS
  CMAKE_ARGS="-DGGML_AVX2=on -DGGML_FMA=on -DGGML_F16C=on -DGGML_NATIVE=off" CMAKE_BUILD_PARALLEL_LEVEL=2 \
    timeout 1500 "$OSCAR_VENV/bin/pip" install -r bench/peer_requirements.txt >"$log_dir/pip.log" 2>&1 ||
    { tail -30 "$log_dir/pip.log" >&2; exit 1; }
  peer_note="installed in this run ($(( SECONDS - t0 )) s)"
  start_s=$SECONDS  # the bound is for the benchmark itself
fi
peer_version=$(timeout 60 "$py" -c "import llama_cpp; print(llama_cpp.__version__)")
want_version=$(sed -n 's/^llama-cpp-python\(\[[a-z]*\]\)\?==\([0-9.]*\).*/\2/p' bench/peer_requirements.txt)
[[ "$peer_version" == "$want_version" ]] ||
  echo "cpu_peer.sh: WARNING: llama-cpp-python $peer_version installed, $want_version pinned" >&2

# 2. oscar: a private copy of the binary.
bin_src="${OSCAR_BIN:-$OSCAR_BUILD/oscar}"
[[ -x "$bin_src" ]] || { echo "cpu_peer.sh: no oscar binary at $bin_src (scripts/build.sh, or set OSCAR_BIN)" >&2; exit 1; }
bin="$log_dir/oscar"
cp "$bin_src" "$bin"

cpu="$(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
isa="$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -xE 'avx2|fma|f16c|avx512f' | sort | tr '\n' ' ' | sed 's/ $//')"
device="CPU: $cpu, $(nproc) cores ($isa)"
commit="$(git rev-parse HEAD 2>/dev/null || echo unknown)"
git_dirty=0; [[ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]] && git_dirty=1

# 3. Rotations for int2-oscar: sets rot and rot_how (rot empty: int2-oscar skipped, rot_how says why).
rotations_for() {
  local model=$1 stem
  stem="$(basename "$model" .gguf)"
  rot="$OSCAR_CACHE/rotations/$stem/$OSCAR_CORPUS_ROTATIONS_NAME"
  rot_how="cached default of scripts/quickstart.sh: oscar calibrate --corpus --tokens 20000 --prompts 40 (clip search, key mean)"
  [[ -f "$rot/manifest.json" ]] && return 0
  rot="$OSCAR_CACHE/rotations/$stem/$OSCAR_ROTATIONS_NAME"
  rot_how="cached fit on calib.txt: oscar calibrate -f calib.txt --tokens 20000 --prompts 40 (clip search, key mean)"
  [[ -f "$rot/manifest.json" ]] && return 0
  rot="$OSCAR_CACHE/rotations/$stem/seq4000_prompt8_noclip_kmean"
  rot_how="quick fit (as bench/serve_cpu.sh): oscar calibrate --no-clip-search --tokens 4000 --prompts 8; the speed of int2-oscar does not depend on the fit"
  [[ -f "$rot/manifest.json" ]] && return 0
  echo "== calibrating quick rotations for $stem into $rot" >&2
  local t
  t=$(step_timeout 1800)
  if ! timeout "$t" "$bin" calibrate -m "$model" -t "$threads" -f "$OSCAR_CALIB_TEXT" \
      --no-clip-search --tokens 4000 --prompts 8 -o "$rot" >"$log_dir/calibrate_$stem.log" 2>&1; then
    tail -10 "$log_dir/calibrate_$stem.log" >&2
    rm -rf "$rot"
    rot=""
    rot_how="int2-oscar skipped: no cached rotations and calibration failed or took over ${t}s (log $log_dir/calibrate_$stem.log)"
    echo "cpu_peer.sh: $rot_how" >&2
  fi
}

# 4. The models.
models=("smollm2|$OSCAR_MODEL")
qwen="${OSCAR_QWEN_MODEL:-$OSCAR_MODELS/Qwen2.5-Coder-1.5B-Instruct.Q4_K_M.gguf}"
qwen_note=""
if [[ $no_qwen == 1 ]]; then
  qwen_note="Qwen2.5-Coder-1.5B skipped (--no-qwen)"
elif [[ -f "$qwen" ]]; then
  models+=("qwen25|$qwen")
else
  qwen_note="Qwen2.5-Coder-1.5B skipped: $qwen not present (bash scripts/setup.sh --qwen fetches it)"
fi
[[ -n "$qwen_note" ]] && echo "== $qwen_note" >&2
mkdir -p "$out_dir"

status=0
for entry in "${models[@]}"; do
  key="${entry%%|*}"; model="${entry#*|}"
  [[ -n "$only" && "$key" != "$only" ]] && continue
  [[ -f "$model" ]] || { echo "cpu_peer.sh: model $model not found (bash scripts/setup.sh)" >&2; exit 1; }
  rotations_for "$model"
  if [[ $quick == 1 ]]; then
    args=(--quick --depths 1024 --n-short 16 --n-long 16 --mem-ctx 1024 --mem-gen 16)
    out="$out_dir/cpu_peer_${key}_quick.json"
  else
    depths=4096; [[ $key == qwen25 ]] && depths=4096,16384
    depths="${OSCAR_PEER_DEPTHS-$depths}"  # e.g. "" : the short plan only (prefill 512, short decode)
    args=(--depths "$depths" --n-short 128 --n-long 32 --mem-ctx 4096 --mem-gen 32)
    # Qwen2.5 at 16K: the pair its target compares; its memory target is int2-oscar's run.
    [[ $key == qwen25 ]] && args+=(--deep-configs "${OSCAR_PEER_DEEP_CONFIGS-llama.cpp:q8_0,oscar:int2-oscar}"
                                   --mem-kvs "${OSCAR_PEER_MEM_KVS-int2-oscar}")
    out="$out_dir/cpu_peer_${key}.json"
  fi
  notes=()
  [[ $key == smollm2 && -n "$qwen_note" ]] && notes+=(--note "$qwen_note")
  [[ -z "$rot" ]] && notes+=(--note "$rot_how")
  t=$(step_timeout $(( total_s )))
  budget=$(( t - 30 ))  # the driver stops starting steps before the outer timeout fires
  echo "== $key: $model (budget ${budget}s)" >&2
  timeout --kill-after=10 "$t" "$py" bench/cpu_peer.py drive --model "$model" --model-key "$key" \
    --oscar-bin "$bin" --oscar-bin-source "$bin_src" --rotations "$rot" --rotations-how "$rot_how" \
    --text "$OSCAR_EVAL_TEXT" --out "$out" --work-dir "$log_dir/$key" --threads "$threads" --reps "$reps" \
    --budget-s "$budget" --step-timeout-s $(( step_minutes * 60 )) "${args[@]}" \
    "${notes[@]}" --device "$device" --commit "$commit" --command "$invoked" --load-at-start "$load_at_start" \
    --peer-version "$peer_version" --peer-note "$peer_note" --git-dirty "$git_dirty" || status=$?
done
echo "logs: $log_dir" >&2
exit $status
