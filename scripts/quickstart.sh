#!/usr/bin/env bash
# The main job: install everything, build, and generate with the default model
# (SmolLM2-135M-Instruct), printing speed and KV-cache memory at the end.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/env.sh"
bash "$here/setup.sh"
bash "$here/build.sh"
cd "$here/.."
"$OSCAR_BUILD/oscar" run -m "$OSCAR_MODEL" --chat --temp 0 -n 160 \
  -p "Explain in a short paragraph why the sky is blue."
