#!/usr/bin/env bash
# The main job: install everything, build, calibrate OSCAR rotations for the default
# model once (cached), and generate with the OSCAR INT2 KV cache, printing speed and
# KV memory against BF16 at the end.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/env.sh"
bash "$here/setup.sh"
bash "$here/build.sh"
cd "$here/.."
rot="$OSCAR_CACHE/rotations/$(basename "$OSCAR_MODEL" .gguf)/seq20000_prompt40"
if [[ ! -f "$rot/manifest.json" ]]; then
  "$OSCAR_BUILD/oscar" calibrate -m "$OSCAR_MODEL" -f "$OSCAR_CALIB_TEXT" --tokens 20000 --prompts 40 -o "$rot"
fi
"$OSCAR_BUILD/oscar" run -m "$OSCAR_MODEL" --kv int2-oscar --rotations "$rot" --chat --temp 0 -n 400 \
  -p "Write a short story (about 300 words) about a lighthouse keeper who finds a message in a bottle."
