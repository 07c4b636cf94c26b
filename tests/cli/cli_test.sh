#!/usr/bin/env bash
# Black-box tests of the oscar CLI: help, bad flags, bad files, and the output
# format of each subcommand on the default model. Usage: cli_test.sh path/to/oscar
set -uo pipefail
bin="$1"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/../../scripts/env.sh"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0 skip=0

check() {  # name, expected exit ("0" or "nonzero"), grep pattern for the output, command...
  local name="$1" want="$2" pattern="$3"; shift 3
  local out rc
  out="$("$@" 2>&1)"; rc=$?
  local ok=1
  if [[ "$want" == 0 && $rc != 0 ]]; then ok=0; fi
  # A crash (signal) is never an acceptable way to fail.
  if [[ "$want" == nonzero && ( $rc == 0 || $rc -ge 128 ) ]]; then ok=0; fi
  if [[ -n "$pattern" ]] && ! grep -qE -- "$pattern" <<<"$out"; then ok=0; fi
  if [[ $ok == 1 ]]; then
    pass=$((pass + 1)); echo "ok   $name"
  else
    fail=$((fail + 1)); echo "FAIL $name (exit $rc, wanted $want, pattern '$pattern')"; echo "$out" | tail -5 | sed 's/^/     /'
  fi
}

check "top-level help" 0 "run" "$bin" --help
for cmd in run chat ppl inspect bench; do check "$cmd --help" 0 "--model" "$bin" "$cmd" --help; done
check "niah --help" 0 "--haystack" "$bin" niah --help
check "eval-kv --help" 0 "--queries" "$bin" eval-kv --help
check "no subcommand" nonzero "" "$bin"
check "unknown subcommand" nonzero "" "$bin" frobnicate
check "unknown flag" nonzero "--bogus" "$bin" run -m x.gguf -p hi --bogus
check "missing model file" nonzero "does not exist" "$bin" run -m "$tmp/none.gguf" -p hi
echo "not a gguf file at all" > "$tmp/text.gguf"
check "not a GGUF file" nonzero "error: .*magic" "$bin" run -m "$tmp/text.gguf" -p hi
: > "$tmp/empty.gguf"
check "empty file" nonzero "error:" "$bin" inspect "$tmp/empty.gguf"
# --device: only cpu and cuda; cuda on a machine without a GPU (or a build without CUDA) is
# a clear error before the model loads, for each command that takes it.
check "bad --device" nonzero "--device" "$bin" run -m "$tmp/text.gguf" -p hi --device tpu
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi >/dev/null 2>&1; then
  check "run --device cuda without a GPU" nonzero "error: --device cuda: (no CUDA device|this oscar was built without)" \
    "$bin" run -m "$tmp/text.gguf" -p hi --device cuda
  check "ppl --device cuda without a GPU" nonzero "error: --device cuda: (no CUDA device|this oscar was built without)" \
    "$bin" ppl -m "$tmp/text.gguf" -f "$tmp/text.gguf" --device cuda
  check "niah --device cuda without a GPU" nonzero "error: --device cuda: (no CUDA device|this oscar was built without)" \
    "$bin" niah -m "$tmp/text.gguf" -f "$tmp/text.gguf" --device cuda
  check "bench --device cuda without a GPU" nonzero "error: --device cuda: (no CUDA device|this oscar was built without)" \
    "$bin" bench -m "$tmp/text.gguf" --device cuda
fi

if [[ -f "$OSCAR_MODEL" ]]; then
  head -c 3000000 "$OSCAR_MODEL" > "$tmp/truncated.gguf"
  check "truncated GGUF" nonzero "error: .*(exceeds|truncated|beyond|past)" "$bin" run -m "$tmp/truncated.gguf" -p hi
  check "bad --kv" nonzero "unknown KV cache type" "$bin" run -m "$OSCAR_MODEL" -p hi --kv int3
  check "bad --kv-layers (empty item)" nonzero "error: --kv-layers: item 2 of '0-1:int4,,27:int8' is empty" \
    "$bin" run -m "$OSCAR_MODEL" -p hi --kv int2 --kv-layers "0-1:int4,,27:int8"
  check "bad --kv-layers (out of range)" nonzero "error: --kv-layers item '30:int8': layer 30 out of range \(the model has 30 layers" \
    "$bin" run -m "$OSCAR_MODEL" -p hi --kv int2 --kv-layers "30:int8"
  check "bad --kv-layers (kivi2)" nonzero "error: --kv-layers item '3:kivi2': kivi2 cannot be mixed" \
    "$bin" run -m "$OSCAR_MODEL" -p hi --kv int2 --kv-layers "3:kivi2"
  check "ppl with --kv-layers" 0 "KV cache bits per element at 512 tokens: [0-9.]+ \(int2\+layers\(0-1:int4,27:int8\)" \
    "$bin" ppl -m "$OSCAR_MODEL" -f "$here/../data/ppl_text.txt" -c 512 --chunks 1 --kv int2 --kv-layers "0-1:int4,27:int8"
  check "bad --top-p" nonzero "top_p" "$bin" run -m "$OSCAR_MODEL" -p hi --top-p 1.5
  check "missing ppl text" nonzero "" "$bin" ppl -m "$OSCAR_MODEL" -f "$tmp/none.txt"
  check "inspect" 0 "272 tensors" "$bin" inspect --no-tensors "$OSCAR_MODEL"
  check "run greedy" 0 "Paris" "$bin" run -m "$OSCAR_MODEL" -p "The capital of France is" -n 4 --temp 0
  check "run reports speed and KV memory" 0 "KV cache \(bf16\)" "$bin" run -m "$OSCAR_MODEL" -p "Hello" -n 4
  check "run --chat" 0 "tokens/s" "$bin" run -m "$OSCAR_MODEL" --chat -p "Say hi." -n 8 --temp 0
  check "prompt longer than context" nonzero "context size" "$bin" run -m "$OSCAR_MODEL" -p "$(printf 'word %.0s' {1..100})" -c 16
  check "ppl output format" 0 "Final estimate: PPL over 2 chunks for n_ctx=128 = [0-9.]+ \+/- [0-9.]+" \
    "$bin" ppl -m "$OSCAR_MODEL" -f "$here/../data/ppl_text.txt" -c 128 --chunks 2
  check "ppl text shorter than a chunk" nonzero "fewer than one chunk" "$bin" ppl -m "$OSCAR_MODEL" -f "$here/../data/tokenizer_corpus.txt" -c 8192
  check "bench json" 0 "decode" "$bin" bench -m "$OSCAR_MODEL" -p 16 -n 2 --json "$tmp/bench.json"
  check "bench wrote json" 0 "prefill_tokens_per_s" cat "$tmp/bench.json"
  check "ppl writes a KLD base" 0 "wrote the log-probabilities of 254 positions" \
    "$bin" ppl -m "$OSCAR_MODEL" -f "$here/../data/ppl_text.txt" -c 256 --chunks 2 --kl-divergence-base "$tmp/kld.bin"
  check "KLD of bf16 against itself" 0 "Mean    KLD:   0\.000000.*" \
    "$bin" ppl -m "$OSCAR_MODEL" --kl-divergence-base "$tmp/kld.bin" --kl-divergence
  check "KLD of int2 is positive" 0 "Same top p: +[1-9][0-9]?\.[0-9]+ " \
    "$bin" ppl -m "$OSCAR_MODEL" --kl-divergence-base "$tmp/kld.bin" --kl-divergence --kv int2 --kv-sink 4 --kv-recent 16
  check "KLD with another -c" nonzero "differs from the base file" \
    "$bin" ppl -m "$OSCAR_MODEL" --kl-divergence-base "$tmp/kld.bin" --kl-divergence -c 512
  check "KLD without a base" nonzero "needs --kl-divergence-base" "$bin" ppl -m "$OSCAR_MODEL" --kl-divergence
  check "KLD corrupt base" nonzero "not a KL-divergence base file" \
    "$bin" ppl -m "$OSCAR_MODEL" --kl-divergence-base "$tmp/text.gguf" --kl-divergence
  check "niah length beyond context" nonzero "error: .*larger than the context" \
    "$bin" niah -m "$OSCAR_MODEL" -f "$here/../data/ppl_text.txt" --lengths 999999
  check "niah finds a needle (bf16)" 0 "Overall accuracy: 1/1" \
    "$bin" niah -m "$OSCAR_MODEL" -f "$here/../data/ppl_text.txt" --lengths 400 --depths 50
  check "eval-kv table" 0 "\| mean \| 0\.0[0-9]+ \| 0\.[0-9]+ \|" \
    "$bin" eval-kv -m "$OSCAR_MODEL" -f "$here/../data/ppl_text.txt" -c 512 --kv bf16,int2 --queries 32
  check "eval-kv --stats" 0 "\| 29 \| [0-9.]+ \| 0\.000 \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| - \|" \
    "$bin" eval-kv -m "$OSCAR_MODEL" -f "$here/../data/ppl_text.txt" -c 512 --kv int2 --queries 8 --stats
  check "calibrate (tiny)" 0 "wrote 30 layers" \
    "$bin" calibrate -m "$OSCAR_MODEL" -f "$here/../data/ppl_text.txt" --tokens 128 --prompts 2 -o "$tmp/rot" --no-clip-search
  check "--no-clip-search keeps the reference clips" 0 "" \
    bash -c "grep -q '\"k_clip\": 0.9599' '$tmp/rot/manifest.json' && ! grep -q clip_search '$tmp/rot/manifest.json'"
  check "int2-oscar splits the key bias by default" 0 "KV int2-oscar$" \
    "$bin" ppl -m "$OSCAR_MODEL" -f "$here/../data/ppl_text.txt" -c 64 --chunks 1 --kv int2-oscar --rotations "$tmp/rot"
  check "--no-k-bias-split is reported" 0 "KV int2-oscar\+no-k-bias-split$" \
    "$bin" ppl -m "$OSCAR_MODEL" -f "$here/../data/ppl_text.txt" -c 64 --chunks 1 --kv int2-oscar --rotations "$tmp/rot" --no-k-bias-split
  check "calibrate writes a key mean per layer (3 KV heads x 64)" 0 "" \
    python3 -c "import json,sys; m=json.load(open('$tmp/rot/manifest.json')); sys.exit(0 if len(m['layers'])==30 and all(len(l['k_mean'])==192 for l in m['layers']) else 1)"
  check "--no-k-mean is reported" 0 "KV int2-oscar\+no-k-mean$" \
    "$bin" ppl -m "$OSCAR_MODEL" -f "$here/../data/ppl_text.txt" -c 64 --chunks 1 --kv int2-oscar --rotations "$tmp/rot" --no-k-mean
  check "eval-kv --k-channel compares the K transforms" 0 "\| mean \| \| 0\.[0-9]+ \| \| 0\.[0-9]+ \|" \
    "$bin" eval-kv -m "$OSCAR_MODEL" -f "$here/../data/ppl_text.txt" -c 384 --queries 8 --kv int2-oscar \
    --rotations "$tmp/rot" --k-channel "$here/../data/ppl_text.txt"
  check "--k-bias-split on a baseline is reported" 0 "KV int4\+k-bias-split$" \
    "$bin" ppl -m "$OSCAR_MODEL" -f "$here/../data/ppl_text.txt" -c 64 --chunks 1 --kv int4 --k-bias-split
  check "--kv-k-type int4 widens the keys and is reported" 0 "KV cache bits per element at 384 tokens: 4\.[0-9]+ \(int2-oscar\+k-int4," \
    "$bin" ppl -m "$OSCAR_MODEL" -f "$here/../data/ppl_text.txt" -c 384 --chunks 1 --kv int2-oscar --rotations "$tmp/rot" \
    --kv-sink 4 --kv-recent 16 --kv-k-type int4
  check "--kv-v-type on kivi2" nonzero "--kv-v-type needs a per-token quantized --kv type" \
    "$bin" ppl -m "$OSCAR_MODEL" -f "$here/../data/ppl_text.txt" -c 64 --chunks 1 --kv kivi2 --kv-v-type int4
  check "--kv-k-type bad" nonzero "--kv-k-type: .*not in" \
    "$bin" ppl -m "$OSCAR_MODEL" -f "$here/../data/ppl_text.txt" -c 64 --chunks 1 --kv int2 --kv-k-type int3
  # Several calibration sources (issue 26): -f PATH[:WEIGHT] repeated, chat .jsonl through the
  # model's template, a corpus directory (--corpus, or the default one), the manifest's record.
  txt="$here/../data/ppl_text.txt"
  printf '%s\n' '[{"role": "user", "content": "What is a cat?"}, {"role": "assistant", "content": "A small furry animal that purrs."}]' \
    '[{"role": "user", "content": "And a dog?"}, {"role": "assistant", "content": "A loyal animal that barks and fetches."}]' \
    > "$tmp/one.jsonl"
  for i in $(seq 1 6); do cat "$tmp/one.jsonl"; done > "$tmp/chat.jsonl"
  check "calibrate -f A:3 -f B:1 shares the prompts 3:1" 0 "75\.0 %  6 prompts, 120 tokens .*ppl_text.txt" \
    "$bin" calibrate -m "$OSCAR_MODEL" -f "$txt:3" -f "$here/../data/tokenizer_corpus.txt:1" --tokens 160 --prompts 8 \
    -o "$tmp/rot_mix" --no-clip-search
  check "the manifest records each source" 0 "" python3 -c "
import json, sys
m = json.load(open('$tmp/rot_mix/manifest.json'))
s = m['calibration_sources']
ok = [x['prompts'] for x in s] == [6, 2] and [x['tokens'] for x in s] == [120, 40] and [x['weight'] for x in s] == [3, 1]
ok = ok and all(len(x['sha256']) == 64 for x in s) and m['tokens'] == 160 and s[0]['window_starts'][1] > 20
sys.exit(0 if ok else 1)"
  "$bin" calibrate -m "$OSCAR_MODEL" -f "$txt:3" -f "$here/../data/tokenizer_corpus.txt:1" --tokens 160 --prompts 8 \
    -o "$tmp/rot_mix2" --no-clip-search >/dev/null 2>&1
  check "a mixed calibration is deterministic" 0 "" \
    bash -c "cmp '$tmp/rot_mix/k_rotation_qqt_r_h_pbr.pt' '$tmp/rot_mix2/k_rotation_qqt_r_h_pbr.pt' && cmp '$tmp/rot_mix/v_rotation_sst_r_h_pbr.pt' '$tmp/rot_mix2/v_rotation_sst_r_h_pbr.pt'"
  check "calibrate a .jsonl through the chat template" 0 "through the chat template" \
    "$bin" calibrate -m "$OSCAR_MODEL" -f "$txt" -f "$tmp/chat.jsonl" --tokens 128 --prompts 4 -o "$tmp/rot_chat" --no-clip-search
  check "the manifest records the chat source" 0 "" python3 -c "
import json, sys
s = json.load(open('$tmp/rot_chat/manifest.json'))['calibration_sources'][1]
sys.exit(0 if s['format'] == 'chat_jsonl' and s['conversations'] == 12 and s['chat_template'] == 'chatml' and s['prompts'] == 2 else 1)"
  mkdir -p "$tmp/corpus/calib"
  cp "$txt" "$tmp/corpus/calib/prose.txt"; cp "$tmp/chat.jsonl" "$tmp/corpus/calib/chat.jsonl"
  printf '%s\n' '{"files": [{"file": "calib/prose.txt", "role": "calib", "domain": "prose-en"},' \
    '{"file": "eval/other.txt", "role": "eval", "domain": "x"},' \
    '{"file": "calib/chat.jsonl", "role": "calib", "domain": "chat"}]}' > "$tmp/corpus/manifest.json"
  check "calibrate --corpus" 0 "from corpus .*/corpus" \
    "$bin" calibrate -m "$OSCAR_MODEL" --corpus "$tmp/corpus" --tokens 128 --prompts 4 -o "$tmp/rot_corpus" --no-clip-search
  check "calibrate with no -f takes \$OSCAR_CORPUS_DIR" 0 "from corpus .*/corpus" \
    env OSCAR_CORPUS_DIR="$tmp/corpus" "$bin" calibrate -m "$OSCAR_MODEL" --tokens 128 --prompts 4 -o "$tmp/rot_default" --no-clip-search
  check "the corpus domains are recorded" 0 "" python3 -c "
import json, sys
m = json.load(open('$tmp/rot_default/manifest.json'))
sys.exit(0 if [s['domain'] for s in m['calibration_sources']] == ['prose-en', 'chat'] and m['calibration_corpus'].endswith('/corpus') else 1)"
  # The issue-26 candidates: sources pooled at equal weight, clips for the worst source, key
  # means kept per layer only where they help.
  check "calibrate --pool equal --clip-objective worst --k-mean-search" 0 \
    "key-mean search: [0-9]+ of 30 layers keep their key mean.*clip search \(worst of 2 sources\)" \
    bash -c "'$bin' calibrate -m '$OSCAR_MODEL' --corpus '$tmp/corpus' --tokens 128 --prompts 4 --sink 4 --recent 16 \
      --probe-tokens 200 --probe-queries 16 --pool equal --clip-objective worst --k-mean-search -o '$tmp/rot_cand' 2>&1 | tr '\r\n' '  '"
  check "rotations tune --k-mean-check compares the model with and without key means" 0 \
    "key-mean check: .* 0\.[0-9]+ with the key means, 0\.[0-9]+ without \([-+]0\.[0-9]+ .* 0\.[0-9]+\): (kept|dropped)" \
    "$bin" rotations tune -m "$OSCAR_MODEL" --rotations "$tmp/rot_cand" -f "$txt" -o "$tmp/rot_check" --k-mean-check \
      --probe-from 0 --probe-tokens 200 --probe-queries 16
  check "the key-mean check records the paired difference and its error" 0 "" python3 -c "
import json, sys
c = json.load(open('$tmp/rot_check/manifest.json'))['searches']['k_mean_check']
ok = c['blocks'] >= 1 and c['difference_stderr'] > 0 and abs(c['difference'] - (c['kld_without'] - c['kld_with'])) < 1e-9
sys.exit(0 if ok else 1)"
  check "the manifest records the pool, the per-source probes and the key-mean choice" 0 "" python3 -c "
import json, sys
m = json.load(open('$tmp/rot_cand/manifest.json'))
c, k = m['searches']['clip_search'], m['searches']['k_mean_search']
ok = m['pool'] == 'equal' and c['objective'] == 'worst' and c['probes'] == ['prose-en', 'chat']
ok = ok and all(len(l['probe_errors']) == 2 and abs(max(l['probe_errors']) - l['error_after']) < 1e-12 for l in c['layers'])
ok = ok and k['probes'] == ['prose-en', 'chat'] and len(k['layers']) == 30
ok = ok and all((len(l.get('k_mean', [])) == 192) == (i in k['kept_layers']) for i, l in enumerate(m['layers']))
sys.exit(0 if ok else 1)"
  check "--pool equal fits other rotations than --pool tokens" nonzero "" \
    cmp -s "$tmp/rot_cand/k_rotation_qqt_r_h_pbr.pt" "$tmp/rot_default/k_rotation_qqt_r_h_pbr.pt"
  check "calibrate --pool bad" nonzero "--pool: .*not in" \
    "$bin" calibrate -m "$OSCAR_MODEL" --corpus "$tmp/corpus" --pool mean -o "$tmp/rot_x"
  check "calibrate --clip-objective bad" nonzero "--clip-objective: .*not in" \
    "$bin" calibrate -m "$OSCAR_MODEL" --corpus "$tmp/corpus" --clip-objective median -o "$tmp/rot_x"
  check "--k-mean-search with --no-k-mean" nonzero "cannot run with --no-k-mean" \
    "$bin" calibrate -m "$OSCAR_MODEL" --corpus "$tmp/corpus" --tokens 128 --prompts 4 --sink 4 --recent 16 \
      --probe-tokens 200 --probe-queries 16 --k-mean-search --no-k-mean -o "$tmp/rot_x"
  check "calibrate without a corpus names fetch-corpus.sh" nonzero "error: no -f and no calibration corpus at .*scripts/fetch-corpus.sh" \
    env OSCAR_CORPUS_DIR="$tmp/no_corpus" "$bin" calibrate -m "$OSCAR_MODEL" -o "$tmp/rot_x"
  check "calibrate -f missing file" nonzero "error: -f '.*/none.txt': calibration file '.*/none.txt' does not exist" \
    "$bin" calibrate -m "$OSCAR_MODEL" -f "$txt" -f "$tmp/none.txt" -o "$tmp/rot_x"
  check "calibrate -f bad weight" nonzero "error: -f '.*ppl_text.txt:two': the weight 'two' is not a number > 0" \
    "$bin" calibrate -m "$OSCAR_MODEL" -f "$txt:two" -o "$tmp/rot_x"
  check "calibrate -f zero weight" nonzero "the weight '0' is not a number > 0" \
    "$bin" calibrate -m "$OSCAR_MODEL" -f "$txt:0" -f "$txt" -o "$tmp/rot_x"
  { cat "$tmp/one.jsonl"; echo '[{"role": "user", "content": "unterminated}]'; } > "$tmp/bad.jsonl"
  check "calibrate malformed .jsonl line" nonzero "error: .*bad.jsonl:3: not valid JSON" \
    "$bin" calibrate -m "$OSCAR_MODEL" -f "$txt" -f "$tmp/bad.jsonl" --tokens 128 --prompts 4 -o "$tmp/rot_x"
  check "calibrate source shorter than its share" nonzero "has [0-9]+ tokens, fewer than its share" \
    "$bin" calibrate -m "$OSCAR_MODEL" -f "$txt" -f "$tmp/one.jsonl" --tokens 4000 --prompts 8 -o "$tmp/rot_x"
  # Per-layer precision under a budget (--kv-budget) and per-layer clip ratios (--clip-search):
  # chosen at calibration, stored with the rotations (directory and GGUF), used by --kv int2-oscar.
  txt="$here/../data/ppl_text.txt"
  check "calibrate --kv-budget" 0 "kv budget 3.000 bits: [0-9]" \
    "$bin" calibrate -m "$OSCAR_MODEL" -f "$txt" --tokens 128 --prompts 2 -o "$tmp/rot_budget" \
    --kv-budget 3.0 --probe-tokens 512 --probe-queries 32
  check "calibrate searches clip ratios by default" 0 '"clip_search"' cat "$tmp/rot_budget/manifest.json"
  check "--k-mean-check with --no-k-mean" nonzero "cannot run with --no-k-mean" \
    "$bin" calibrate -m "$OSCAR_MODEL" -f "$txt" --tokens 128 --prompts 2 --k-mean-check --no-k-mean -o "$tmp/rot_x"
  check "budget types are used at run time" 0 "KV int2-oscar\+layers\([0-9]" \
    "$bin" ppl -m "$OSCAR_MODEL" -f "$txt" -c 64 --chunks 1 --kv int2-oscar --rotations "$tmp/rot_budget"
  check "--kv-layers none keeps int2-oscar uniform" 0 "KV int2-oscar$" \
    "$bin" ppl -m "$OSCAR_MODEL" -f "$txt" -c 64 --chunks 1 --kv int2-oscar --rotations "$tmp/rot_budget" --kv-layers none
  check "rotations inspect shows the budget types" 0 "per-layer KV types over int2-oscar \(--kv-budget 3.00 bits\)" \
    "$bin" rotations inspect "$tmp/rot_budget"
  check "embed rotations with budget types" 0 "wrote" \
    "$bin" rotations embed -m "$OSCAR_MODEL" -r "$tmp/rot_budget" -o "$tmp/with_rot.gguf"
  check "budget types from an embedded GGUF" 0 "KV int2-oscar\+layers\([0-9]" \
    "$bin" ppl -m "$tmp/with_rot.gguf" -f "$txt" -c 64 --chunks 1 --kv int2-oscar
  rm -f "$tmp/with_rot.gguf"
  check "--kv-budget below int2-oscar's bits" nonzero "below the cheapest choice" \
    "$bin" calibrate -m "$OSCAR_MODEL" -f "$txt" --tokens 128 --prompts 2 -o "$tmp/rot_low" \
    --kv-budget 2.0 --probe-tokens 400 --probe-queries 8 --no-clip-search
  check "--kv-budget needs an OSCAR type" nonzero "tune an OSCAR KV type" \
    "$bin" calibrate -m "$OSCAR_MODEL" -f "$txt" --tokens 128 --prompts 2 -o "$tmp/rot_low" --kv int4 --kv-budget 3
  check "--probe-tokens inside the windows" nonzero "must exceed the BF16 windows" \
    "$bin" calibrate -m "$OSCAR_MODEL" -f "$txt" --tokens 128 --prompts 2 -o "$tmp/rot_low" --kv-budget 3 --probe-tokens 300
  check "rotations tune --clip-search" 0 "clip search: mean attention-output error 0\.[0-9]+ -> 0\.[0-9]+" \
    "$bin" rotations tune -m "$OSCAR_MODEL" --rotations "$tmp/rot" -f "$txt" -o "$tmp/rot_clip" --clip-search \
    --probe-tokens 512 --probe-queries 32
  check "tuned clips are kept in the manifest" 0 '"clip_search"' cat "$tmp/rot_clip/manifest.json"
  check "rotations tune --k-scale" 0 "k-scale: fitted on 128 tokens" \
    "$bin" rotations tune -m "$OSCAR_MODEL" --rotations "$tmp/rot" -f "$txt" -o "$tmp/rot_kscale" --k-scale \
    --k-scale-tokens 128 --probe-tokens 512 --probe-queries 32
  check "rotations tune --k-scale writes a scale per layer and searches clips" 0 "" \
    python3 -c "import json,sys; m=json.load(open('$tmp/rot_kscale/manifest.json')); sys.exit(0 if all(len(l['k_scale'])==192 for l in m['layers']) and 'clip_search' in m['searches'] else 1)"
  check "--k-scale is reported" 0 "KV int2-oscar\+k-scale$" \
    "$bin" ppl -m "$OSCAR_MODEL" -f "$txt" -c 64 --chunks 1 --kv int2-oscar --rotations "$tmp/rot_kscale" --k-scale
  check "a set with scales notes --k-scale" 0 "add --k-scale to use it" \
    "$bin" ppl -m "$OSCAR_MODEL" -f "$txt" -c 64 --chunks 1 --kv int2-oscar --rotations "$tmp/rot_kscale"
  check "--k-scale on a set without scales" nonzero "carry no per-channel key scale" \
    "$bin" ppl -m "$OSCAR_MODEL" -f "$txt" -c 64 --chunks 1 --kv int2-oscar --rotations "$tmp/rot" --k-scale
  check "rotations tune with nothing to tune" nonzero "nothing to tune" \
    "$bin" rotations tune -m "$OSCAR_MODEL" --rotations "$tmp/rot" -f "$txt" -o "$tmp/rot_x"
  check "rotations tune onto its input" nonzero "must differ" \
    "$bin" rotations tune -m "$OSCAR_MODEL" --rotations "$tmp/rot" -f "$txt" -o "$tmp/rot" --clip-search
  check "eval-kv oscar without rotations" nonzero "needs calibrated rotations" \
    "$bin" eval-kv -m "$OSCAR_MODEL" -f "$here/../data/ppl_text.txt" -c 512 --kv int2-oscar
  check "eval-kv bad --queries" nonzero "--queries must be" \
    "$bin" eval-kv -m "$OSCAR_MODEL" -f "$here/../data/ppl_text.txt" -c 512 --kv int2 --queries 0
  check "chat session" 0 "" bash -c "printf 'Hi\n/exit\n' | '$bin' chat -m '$OSCAR_MODEL' -n 8 --temp 0"
elif [[ "${OSCAR_REQUIRE_MODEL:-0}" == 1 ]]; then
  fail=$((fail + 1)); echo "FAIL default model missing: $OSCAR_MODEL"
else
  skip=$((skip + 1)); echo "skip model tests: $OSCAR_MODEL missing"
fi

# make-model: a random model at a named shape loads and generates through the normal path.
check "make-model --help" 0 "--shape" "$bin" make-model --help
check "make-model tiny" 0 "wrote .*random tiny" "$bin" make-model --shape tiny -o "$tmp/random_tiny.gguf" --seed 1
check "run a random tiny model" 0 "tokens/s" "$bin" run -m "$tmp/random_tiny.gguf" -p hi -n 4 --temp 0
check "run --chat on a random tiny model" 0 "tokens/s" "$bin" run -m "$tmp/random_tiny.gguf" --chat -p hi -n 4 --temp 0
check "make-model unknown shape" nonzero "error: unknown model shape 'qwen9' \(known: qwen3-32b, qwen3-8b" \
  "$bin" make-model --shape qwen9 -o "$tmp/x.gguf"
check "make-model unwritable output" nonzero "error: cannot create '.*/no/such/dir/x.gguf.tmp'" \
  "$bin" make-model --shape tiny -o "$tmp/no/such/dir/x.gguf"
check "make-model onto a directory" nonzero "error: cannot write '.*': it exists and is not a regular file" \
  "$bin" make-model --shape tiny -o "$tmp"
check "make-model --type q8_0" 0 "wrote .*random tiny, Q8_0 matrices" "$bin" make-model --shape tiny --type q8_0 \
  -o "$tmp/random_tiny_q8.gguf"
check "run a random Q8_0 tiny model" 0 "tokens/s" "$bin" run -m "$tmp/random_tiny_q8.gguf" -p hi -n 4 --temp 0
check "make-model --type q4_k" nonzero "--type" "$bin" make-model --shape tiny --type q4_k -o "$tmp/x.gguf"
check "make-model --vocab too small" nonzero "--vocab" "$bin" make-model --shape tiny -o "$tmp/x.gguf" --vocab 100

echo "$pass passed, $fail failed, $skip skipped"
[[ $fail == 0 ]]
