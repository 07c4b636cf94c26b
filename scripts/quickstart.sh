#!/usr/bin/env bash
# The main job: install everything, build, calibrate OSCAR rotations for the default
# model once on the multi-domain corpus (cached), and generate with the OSCAR INT2 KV
# cache from a long prompt (the opening chapters of a held-out novel), printing speed and
# KV memory against BF16.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/env.sh"
bash "$here/setup.sh"
bash "$here/build.sh"
cd "$here/.."
# Rotations fitted on the multi-domain corpus (prose, code, man pages, chats through the
# model's template, German, Spanish: equal shares), under a name of their own (..._corpus).
rot="$OSCAR_CACHE/rotations/$(basename "$OSCAR_MODEL" .gguf)/$OSCAR_CORPUS_ROTATIONS_NAME"
if [[ ! -f "$rot/manifest.json" ]]; then
  "$OSCAR_BUILD/oscar" calibrate -m "$OSCAR_MODEL" --corpus "$OSCAR_CORPUS_DIR" --tokens 20000 --prompts 40 -o "$rot"
fi
prompt="$OSCAR_CACHE/data/demo_prompt.txt"
{ head -c 7000 "$OSCAR_EVAL_TEXT"; printf '\n\nA summary of the passage above, in a few sentences:\n'; } > "$prompt"
"$OSCAR_BUILD/oscar" run -m "$OSCAR_MODEL" --kv int2-oscar --rotations "$rot" -f "$prompt" --no-display-prompt \
  -n 200 --temp 0.6 --repeat-penalty 1.1 --seed 7
