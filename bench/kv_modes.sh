#!/usr/bin/env bash
# Side-by-side perplexity and KL divergence against BF16 KV (llama-perplexity's
# --kl-divergence) of every KV format on the held-out novel, with effective bits per
# element at the evaluated length. Writes a Markdown table and JSON rows.
#   bench/kv_modes.sh CTX CHUNKS OUT_PREFIX [MODEL] [ROTATIONS]
# OSCAR_KV_MODES overrides the list ("int4+k-bias-split" / "int2-oscar+no-k-bias-split" /
# "int2-oscar+no-k-mean" / "int2-oscar+k-scale" add that flag; "+kv-group=32", "+kv-sink=N",
# "+kv-recent=N" set that option; "+k-int4" / "+v-int4" (or int8) widen the keys' or the
# values' codes; "int2-oscar@DIR" uses the rotations in DIR, e.g. ones from `oscar rotations
# tune`, and is labelled with DIR's name; suffixes come before "@DIR"); the BF16 base run is
# stored once per model, ctx and chunk count under $OSCAR_CACHE/kld/ and reused. OSCAR_PPL_ARGS adds arguments to every
# `oscar ppl` run, base included (e.g. "--device cuda"; the base is then stored apart).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/../scripts/env.sh"
ctx="$1" chunks="$2" out="$3" model="${4:-$OSCAR_MODEL}" rot="${5:-}"
bin="${OSCAR_BIN:-$here/../$OSCAR_BUILD/oscar}"
modes="${OSCAR_KV_MODES:-bf16 int8 int4 int2 int2-hadamard kivi2 int2-oscar int2-oscar-lloydmax int2-oscar-lloydmax-exact}"
name="$(basename "$model" .gguf)"
if [[ -z "$rot" ]]; then
  rot="$OSCAR_CACHE/rotations/$name/$OSCAR_ROTATIONS_NAME"
  [[ -f "$rot/manifest.json" ]] || "$bin" calibrate -m "$model" -f "$OSCAR_CALIB_TEXT" --tokens 20000 --prompts 40 -o "$rot"
fi
mkdir -p "$OSCAR_CACHE/kld"
read -r -a ppl_args <<<"${OSCAR_PPL_ARGS:-}"
args_tag=""
[[ ${#ppl_args[@]} -eq 0 ]] || args_tag="_$(tr -c 'a-zA-Z0-9' '_' <<<"${ppl_args[*]}" | sed 's/_*$//')"
base="$OSCAR_CACHE/kld/${name}_$(basename "$OSCAR_EVAL_TEXT" .txt)_c${ctx}_n${chunks}${args_tag}.bin"
base_log=""
if [[ ! -f "$base" ]]; then
  base_log="$("$bin" ppl -m "$model" -f "$OSCAR_EVAL_TEXT" -c "$ctx" --chunks "$chunks" --kv bf16 \
              "${ppl_args[@]}" --kl-divergence-base "$base.tmp" 2>&1)" || { echo "$base_log" | tail -3; exit 1; }
  mv "$base.tmp" "$base"
fi
commit="$(git -C "$here/.." rev-parse --short HEAD 2>/dev/null || echo unknown)"
echo "| KV | ctx | bits/element | PPL | ± | PPL / BF16 | ± | mean KLD | ± | 99% KLD | same top-1 % |" > "$out.md"
echo "|---|---|---|---|---|---|---|---|---|---|---|" >> "$out.md"
echo "[" > "$out.json"
first=1
field() { sed -n "s/^$1 *: *\([-0-9.e]*\)\( +\/- *\([-0-9.e]*\)\)\?.*/\\$2/p" <<<"$log" | head -1; }
for kv in $modes; do
  if [[ $kv == bf16 && -n "$base_log" ]]; then
    # The base run itself: against itself KLD is 0 and top-1 agreement 100 % by definition.
    log="$base_log"
    ppl="$(sed -n 's/^Final estimate: .* = \([0-9.]*\) +.*/\1/p' <<<"$log")"
    log+=$'\nMean PPL(Q)/PPL(base) : 1.000000 +/- 0.000000\nMean    KLD: 0.000000 +/- 0.000000\n99.0%   KLD: 0.000000\nSame top p: 100.000'
  else
    extra=() base_kv="$kv" mode_rot="$rot"
    if [[ $kv == *@* ]]; then
      mode_rot="${kv#*@}" base_kv="${kv%%@*}"
      kv="$base_kv@$(basename "$mode_rot")"
    fi
    while true; do  # flag suffixes, in any order
      case "$base_kv" in
        *+no-k-bias-split) extra+=(--no-k-bias-split) base_kv="${base_kv%+no-k-bias-split}" ;;
        *+k-bias-split) extra+=(--k-bias-split) base_kv="${base_kv%+k-bias-split}" ;;
        *+no-k-mean) extra+=(--no-k-mean) base_kv="${base_kv%+no-k-mean}" ;;
        *+k-scale) extra+=(--k-scale) base_kv="${base_kv%+k-scale}" ;;
        *+k-int4|*+k-int8|*+v-int4|*+v-int8)  # "+k-int4" → --kv-k-type int4
          opt="${base_kv##*+}" base_kv="${base_kv%+*}"
          extra+=("--kv-${opt%%-*}-type" "${opt#*-}") ;;
        *+kv-group=*|*+kv-sink=*|*+kv-recent=*)  # "+kv-recent=512" → --kv-recent 512
          opt="${base_kv##*+}" base_kv="${base_kv%+*}"
          extra+=("--${opt%%=*}" "${opt#*=}") ;;
        *) break ;;
      esac
    done
    log="$("$bin" ppl -m "$model" -c "$ctx" --chunks "$chunks" --kv "$base_kv" "${extra[@]}" \
           --rotations "$mode_rot" "${ppl_args[@]}" --kl-divergence-base "$base" --kl-divergence 2>&1)" || { echo "$log" | tail -3; exit 1; }
    ppl="$(field 'Mean PPL(Q)' 1)"
  fi
  ppl_err="$(sed -n 's/^Final estimate: .* = [0-9.]* +\/- \([0-9.]*\).*/\1/p' <<<"$log")"
  ratio="$(field 'Mean PPL(Q)\/PPL(base)' 1)" ratio_err="$(field 'Mean PPL(Q)\/PPL(base)' 3)"
  kld="$(field 'Mean    KLD' 1)" kld_err="$(field 'Mean    KLD' 3)" kld99="$(field '99.0%   KLD' 1)"
  top1="$(sed -n 's/^Same top p: *\([0-9.]*\).*/\1/p' <<<"$log")"
  bits="$(sed -n 's/^KV cache bits per element at [0-9]* tokens: \([0-9.]*\).*/\1/p' <<<"$log")"
  echo "| $kv | $ctx | $bits | $ppl | $ppl_err | $ratio | $ratio_err | $kld | $kld_err | $kld99 | $top1 |" | tee -a "$out.md"
  [[ $first == 1 ]] || echo "," >> "$out.json"
  first=0
  printf '{"kv": "%s", "ctx": %s, "chunks": %s, "bits_per_element": %s, "ppl": %s, "ppl_stderr": %s, "ppl_ratio_bf16": %s, "ppl_ratio_stderr": %s, "kld_mean": %s, "kld_stderr": %s, "kld_p99": %s, "same_top1_pct": %s}' \
    "$kv" "$ctx" "$chunks" "$bits" "$ppl" "$ppl_err" "$ratio" "$ratio_err" "$kld" "$kld_err" "$kld99" "$top1" >> "$out.json"
done
printf '\n]\n' >> "$out.json"
echo "model $name, text $(basename "$OSCAR_EVAL_TEXT"), $chunks chunk(s) of $ctx, rotations $rot, commit $commit, $(date -u +%F)${OSCAR_PPL_ARGS:+, ppl args: $OSCAR_PPL_ARGS}" >> "$out.md"
