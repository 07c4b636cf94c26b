#!/usr/bin/env bash
# Needle in a haystack for every KV format, side by side: one `oscar niah` run per mode
# over the same needles (same seed), merged into one Markdown table and one JSON file.
#   bench/niah_modes.sh LENGTHS DEPTHS OUT_PREFIX [MODEL] [ROTATIONS]
#   e.g. bench/niah_modes.sh 1024,2048,4096 0,50,100 bench/results/niah_smollm2
# OSCAR_KV_MODES overrides the list ("int2-oscar@DIR": rotations from DIR); the haystack is the held-out novel ($OSCAR_EVAL_TEXT).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/../scripts/env.sh"
lengths="$1" depths="$2" out="$3" model="${4:-$OSCAR_MODEL}" rot="${5:-}"
bin="${OSCAR_BIN:-$here/../$OSCAR_BUILD/oscar}"
modes="${OSCAR_KV_MODES:-bf16 int8 int4 int2 int2-hadamard kivi2 int2-oscar int2-oscar-lloydmax int2-oscar-lloydmax-exact}"
name="$(basename "$model" .gguf)"
[[ -n "$rot" ]] || rot="$OSCAR_CACHE/rotations/$name/$OSCAR_ROTATIONS_NAME"
max_len="$(tr ',' '\n' <<<"$lengths" | sort -n | tail -1)"
parts=()
for kv in $modes; do
  mode_rot="$rot" base_kv="$kv"  # "int2-oscar@DIR": rotations from DIR, labelled with its name
  if [[ $kv == *@* ]]; then mode_rot="${kv#*@}" base_kv="${kv%%@*}" kv="$base_kv@$(basename "$mode_rot")"; fi
  "$bin" niah -m "$model" -f "$OSCAR_EVAL_TEXT" -c "$max_len" --lengths "$lengths" --depths "$depths" --kv "$base_kv" \
    --rotations "$mode_rot" --json "$out.$kv.json" | tail -n +2
  parts+=("$out.$kv.json")
done
commit="$(git -C "$here/.." rev-parse --short HEAD 2>/dev/null || echo unknown)"
"$OSCAR_VENV/bin/python" "$here/merge_niah.py" "$out" "$commit" "${parts[@]}"
rm -f "${parts[@]}"
