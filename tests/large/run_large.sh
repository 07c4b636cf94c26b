#!/usr/bin/env bash
# Opt-in large-model tier: oscar vs the independent NumPy reference on Qwen2.5-Coder-1.5B
# (qwen2: QKV bias, NeoX RoPE, Q4_K/Q6_K weights, qwen2 pre-tokenizer, head_dim 128).
#   OSCAR_TEST_LARGE=1 [OSCAR_BIN=build/oscar] bash tests/large/run_large.sh
# Checks, engine and reference run one after the other (each holds ~7-9 GB of f32 weights):
#   1. greedy: 32 tokens for one prompt, `oscar run --temp 0 --kv f32` must print exactly the
#      reference's tokens (decoded; up to the first end-of-generation token);
#   2. perplexity on tests/data/ppl_text.txt, -c 256 --chunks 2 (docs eval-protocol) with the
#      default KV (bf16; OSCAR_LARGE_PPL_KV="bf16 f32" for both): within 0.5 % of the reference;
#   3. the key-bias split on the held-out novel (-c 1024): int4 collapses without it and
#      stays within 2 % of BF16 with it;
#   4. calibrate → int2-oscar within 5 % of BF16 on the held-out novel (-c 1024).
# Exits 0 with "skipped" unless OSCAR_TEST_LARGE=1, and when the model file is missing
# (fetch it with scripts/fetch-qwen.sh). About 4 minutes on 2 idle cores (the reference
# is ~2.5 of them; its result is cached in the work dir and reused while nothing changed).
# Environment: OSCAR_BIN (engine, default build/oscar), OSCAR_QWEN_MODEL (model file),
# OSCAR_THREADS (engine threads, default 2), OSCAR_LARGE_OUT (work dir, default
# build/large), OSCAR_LARGE_PROMPT (greedy prompt, default "def fibonacci(n):"),
# OSCAR_LARGE_PPL_KV (KV types for perplexity, default bf16), OSCAR_LARGE_FRESH_REF=1.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
source "$root/scripts/env.sh"

say() { echo "[large] $*"; }
if [[ "${OSCAR_TEST_LARGE:-0}" != 1 ]]; then
  say "skipped (set OSCAR_TEST_LARGE=1 to run the large-model tier)"
  exit 0
fi
model="${OSCAR_QWEN_MODEL:-$OSCAR_MODELS/Qwen2.5-Coder-1.5B-Instruct.Q4_K_M.gguf}"
if [[ ! -f "$model" ]]; then
  say "skipped: model not found: $model (run scripts/fetch-qwen.sh)"
  exit 0
fi
bin="${OSCAR_BIN:-build/oscar}"
[[ "$bin" == /* ]] || bin="$root/$bin"
[[ -x "$bin" ]] || { say "FAIL: engine binary not found or not executable: $bin (set OSCAR_BIN)"; exit 1; }
py="$OSCAR_VENV/bin/python"
[[ -x "$py" ]] || { say "FAIL: no Python venv at $OSCAR_VENV (run scripts/setup.sh)"; exit 1; }
threads="${OSCAR_THREADS:-2}"
work="${OSCAR_LARGE_OUT:-$root/build/large}"
prompt="${OSCAR_LARGE_PROMPT:-def fibonacci(n):}"
text="$root/tests/data/ppl_text.txt"
ctx=256 chunks=2 n_greedy=32 tol_pct=0.5
ppl_kvs="${OSCAR_LARGE_PPL_KV:-bf16}"
mkdir -p "$work"
t_start=$SECONDS

say "model $model"
say "engine $bin (-t $threads)"
# The reference result depends only on the model, the reference code, the text and the
# parameters: reuse it when none of them changed (OSCAR_LARGE_FRESH_REF=1 recomputes it).
ref_key="$( { echo "$prompt|$n_greedy|$ctx|$chunks|$model|$(stat -c '%s %Y' "$model")"
             cat "$root/tests/large/qwen_reference.py" "$root/tests/reference/reference_forward.py" \
                 "$root/tests/reference/make_golden.py" "$text"; } | sha256sum | cut -d' ' -f1)"
if [[ "${OSCAR_LARGE_FRESH_REF:-0}" != 1 && -f "$work/ref.json" && -f "$work/ref.key" \
      && "$(cat "$work/ref.key")" == "$ref_key" ]]; then
  say "reference: NumPy forward, reusing $work/ref.json (same model, code, text and parameters)"
else
  say "reference: NumPy forward (tests/reference/reference_forward.py), 1 BLAS thread"
  rm -f "$work/ref.json" "$work/ref.key"
  OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-1}" "$py" "$root/tests/large/qwen_reference.py" \
    --model "$model" --prompt "$prompt" -n "$n_greedy" --text "$text" --ctx "$ctx" --chunks "$chunks" \
    --out "$work/ref.json" 2> >(sed 's/^/[large] /' >&2) \
    || { say "FAIL: reference run failed"; exit 1; }
  echo "$ref_key" > "$work/ref.key"
fi

"$bin" run -m "$model" -t "$threads" --kv f32 --temp 0 -n "$n_greedy" --no-display-prompt -p "$prompt" \
  > "$work/engine_run.txt" 2> "$work/engine_run.err" \
  || { say "FAIL: engine run failed:"; cat "$work/engine_run.err" >&2; exit 1; }
for kv in $ppl_kvs; do
  "$bin" ppl -m "$model" -t "$threads" --kv "$kv" -f "$text" -c "$ctx" --chunks "$chunks" \
    > "$work/engine_ppl_$kv.txt" 2> "$work/engine_ppl_$kv.err" \
    || { say "FAIL: engine ppl (--kv $kv) failed:"; cat "$work/engine_ppl_$kv.err" >&2; exit 1; }
done

rc=0
"$py" - "$work" "$tol_pct" $ppl_kvs <<'PY' || rc=$?
import json, re, sys
work, tol = sys.argv[1], float(sys.argv[2])
ref = json.load(open(f"{work}/ref.json", encoding="utf-8"))
case = ref["cases"][0]
ok = True

# 1. greedy text: the engine prints the completion and one final newline.
eng = open(f"{work}/engine_run.txt", "rb").read().decode("utf-8", "replace")
if eng.endswith("\n"):
    eng = eng[:-1]
want = case["text_until_eog"]
print(f"[large] greedy prompt {case['prompt']!r} ({len(case['prompt_ids'])} tokens), "
      f"{case['n_until_eog']} tokens before EOG of {ref['n_greedy']}")
print(f"[large]   reference: {want!r}")
print(f"[large]   engine:    {eng!r}")
if eng == want:
    print(f"[large] ok   greedy continuation identical (min top1-top2 margin "
          f"{min(case['greedy_margins'][:max(case['n_until_eog'], 1)]):.3f})")
else:
    ok = False
    i = next((k for k, (a, b) in enumerate(zip(eng, want)) if a != b), min(len(eng), len(want)))
    print(f"[large] FAIL greedy continuation differs from character {i}: "
          f"engine {eng[i:i+40]!r} vs reference {want[i:i+40]!r}")
    print(f"[large]   reference greedy ids {case['greedy_ids']}")
    print(f"[large]   reference margins {case['greedy_margins']}")

# 2. perplexity
print(f"[large] reference PPL over {ref['ppl_chunks']} chunks for n_ctx={ref['ppl_ctx']} = "
      f"{ref['ppl']:.4f} +/- {ref['ppl_stderr']:.4f}")
for kv in sys.argv[3:]:
    out = open(f"{work}/engine_ppl_{kv}.txt", encoding="utf-8").read()
    m = re.search(r"Final estimate: PPL over (\d+) chunks for n_ctx=(\d+) = ([0-9.eE+-]+)", out)
    if not m:
        ok = False
        print(f"[large] FAIL engine ppl (--kv {kv}): no 'Final estimate' line in output")
        continue
    n, c, p = int(m.group(1)), int(m.group(2)), float(m.group(3))
    rel = 100.0 * (p - ref["ppl"]) / ref["ppl"]
    good = n == ref["ppl_chunks"] and c == ref["ppl_ctx"] and abs(rel) <= tol
    ok &= good
    print(f"[large] {'ok  ' if good else 'FAIL'} engine PPL (--kv {kv}) over {n} chunks for "
          f"n_ctx={c} = {p:.4f} ({rel:+.3f} % vs reference, tolerance {tol} %)")
sys.exit(0 if ok else 1)
PY
# 3. The key-bias split (the fix for Qwen2.5's low-bit keys, docs/results.md): on the
#    held-out novel at -c 1024 (704 history tokens), int4 without it must be far worse
#    than BF16 (> 1.5×: the collapse is real) and with it within 2 % of BF16.
novel="${OSCAR_EVAL_TEXT}"
if [[ -f "$novel" ]]; then
  ppl_of() { "$bin" ppl -m "$model" -t "$threads" -f "$novel" -c 1024 --chunks 1 "$@" 2>/dev/null \
               | sed -n 's/^Final estimate: .* = \([0-9.]*\) +.*/\1/p'; }
  p_bf16="$(ppl_of --kv bf16)" p_int4="$(ppl_of --kv int4)" p_split="$(ppl_of --kv int4 --k-bias-split)"
  if "$py" -c "import sys; b,i,s=map(float,sys.argv[1:]); sys.exit(0 if i > 1.5*b and abs(s/b-1) <= 0.02 else 1)" \
       "$p_bf16" "$p_int4" "$p_split"; then
    say "ok   key-bias split: PPL bf16 $p_bf16, int4 $p_int4, int4 --k-bias-split $p_split (-c 1024)"
  else
    say "FAIL key-bias split: PPL bf16 $p_bf16, int4 $p_int4, int4 --k-bias-split $p_split (-c 1024)"; rc=1
  fi
  # 4. OSCAR end to end: calibrate (the cached full calibration when bench/ made one, else
  #    a small one here: 4000 tokens, the default clip search on 1024 probe tokens), then
  #    int2-oscar (key-bias split and searched clips by default) within 5 % of BF16.
  rot="$OSCAR_CACHE/rotations/$(basename "$model" .gguf)/$OSCAR_ROTATIONS_NAME"
  if [[ ! -f "$rot/manifest.json" ]]; then
    rot="$work/rotations"
    [[ -f "$rot/manifest.json" ]] || "$bin" calibrate -m "$model" -t "$threads" -f "$OSCAR_CALIB_TEXT" --tokens 4000 \
      --prompts 8 --probe-tokens 1024 -o "$rot" > "$work/calibrate.log" 2>&1 \
      || { say "FAIL: calibrate failed:"; tail -3 "$work/calibrate.log" >&2; rc=1; }
  fi
  p_oscar="$(ppl_of --kv int2-oscar --rotations "$rot")"
  if "$py" -c "import sys; b,o=map(float,sys.argv[1:]); sys.exit(0 if abs(o/b-1) <= 0.05 else 1)" "$p_bf16" "$p_oscar"; then
    say "ok   int2-oscar PPL $p_oscar vs bf16 $p_bf16 (-c 1024, rotations $rot)"
  else
    say "FAIL int2-oscar PPL $p_oscar vs bf16 $p_bf16 (-c 1024, rotations $rot): more than 5 % apart"; rc=1
  fi
else
  say "FAIL key-bias split check: held-out text $novel missing (run scripts/setup.sh)"; rc=1
fi
say "engine speed (greedy run): $(grep -o 'prompt: .*' "$work/engine_run.err" || true)"
say "$([[ $rc == 0 ]] && echo PASSED || echo FAILED) in $((SECONDS - t_start)) s (outputs in $work)"
exit $rc
