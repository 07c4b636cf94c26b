#!/usr/bin/env bash
# Side-by-side perplexity of every KV format on the held-out novel, with effective bits
# per element at the evaluated length. Writes a Markdown table and JSON rows.
#   bench/kv_modes.sh CTX CHUNKS OUT_PREFIX [MODEL] [ROTATIONS]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/../scripts/env.sh"
ctx="$1" chunks="$2" out="$3" model="${4:-$OSCAR_MODEL}" rot="${5:-}"
bin="${OSCAR_BIN:-$here/../$OSCAR_BUILD/oscar}"
modes="${OSCAR_KV_MODES:-bf16 int8 int4 int2 int2-hadamard kivi2 int2-oscar int2-oscar-lloydmax int2-oscar-lloydmax-exact}"
if [[ -z "$rot" ]]; then
  rot="$OSCAR_CACHE/rotations/$(basename "$model" .gguf)/seq20000_prompt40"
  [[ -f "$rot/manifest.json" ]] || "$bin" calibrate -m "$model" -f "$OSCAR_CALIB_TEXT" --tokens 20000 --prompts 40 -o "$rot"
fi
commit="$(git -C "$here/.." rev-parse --short HEAD 2>/dev/null || echo unknown)"
echo "| KV | ctx | PPL | ± | PPL / BF16 | bits/element |" > "$out.md"
echo "|---|---|---|---|---|---|" >> "$out.md"
echo "[" > "$out.json"
first=1 base=""
for kv in $modes; do
  log="$("$bin" ppl -m "$model" -f "$OSCAR_EVAL_TEXT" -c "$ctx" --chunks "$chunks" --kv "$kv" --rotations "$rot" 2>&1)"
  ppl="$(sed -n 's/^Final estimate: .* = \([0-9.]*\) +\/- \([0-9.]*\).*/\1/p' <<<"$log")"
  err="$(sed -n 's/^Final estimate: .* = \([0-9.]*\) +\/- \([0-9.]*\).*/\2/p' <<<"$log")"
  bits="$(sed -n 's/^KV cache bits per element at [0-9]* tokens: \([0-9.]*\).*/\1/p' <<<"$log")"
  [[ -n "$base" ]] || base="$ppl"
  ratio="$(python3 -c "print(f'{$ppl/$base:.4f}')")"
  echo "| $kv | $ctx | $ppl | $err | $ratio | $bits |" | tee -a "$out.md"
  [[ $first == 1 ]] || echo "," >> "$out.json"
  first=0
  printf '{"kv": "%s", "ctx": %s, "chunks": %s, "ppl": %s, "ppl_stderr": %s, "ppl_ratio_bf16": %s, "bits_per_element": %s}' \
    "$kv" "$ctx" "$chunks" "$ppl" "$err" "$ratio" "${bits:-null}" >> "$out.json"
done
printf '\n]\n' >> "$out.json"
echo "model $(basename "$model"), text $(basename "$OSCAR_EVAL_TEXT"), rotations $rot, commit $commit, $(date -u +%F)" >> "$out.md"
