#!/usr/bin/env bash
# Fits (once) and tunes OSCAR rotations for a model on the calibration text, caching both
# under $OSCAR_CACHE/rotations/<model>/, and prints the tuned directory. A name for the
# tuning and `oscar rotations tune` flags follow the model:
#   bench/tuned_rotations.sh MODEL clip --clip-search
#   bench/tuned_rotations.sh MODEL clip_b2.5 --clip-search --kv-budget 2.5
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/../scripts/env.sh"
model="$1" tag="$2"; shift 2
bin="${OSCAR_BIN:-$here/../$OSCAR_BUILD/oscar}"
name="$(basename "$model" .gguf)"
base="$OSCAR_CACHE/rotations/$name/seq20000_prompt40"
[[ -f "$base/manifest.json" ]] || "$bin" calibrate -m "$model" -f "$OSCAR_CALIB_TEXT" --tokens 20000 --prompts 40 --no-clip-search \
  -o "$base" >&2
out="${base}_$tag"
[[ -f "$out/manifest.json" ]] || "$bin" rotations tune -m "$model" --rotations "$base" -f "$OSCAR_CALIB_TEXT" -o "$out" "$@" >&2
echo "$out"
