#!/usr/bin/env bash
# Builds `oscar` with ASan and UBSan (clang, into $OSCAR_BUILD-fuzz, as scripts/fuzz.sh) and
# soaks its server on the default model (bench/serve_soak.py): streaming clients over
# capacity, disconnects, malformed requests and stalled connections, in waves. Exits
# non-zero on any failure or sanitizer report.
#   bash scripts/soak.sh [--seconds N] [--out FILE] [other serve_soak.py flags]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/env.sh"
cd "$here/.."
source "$here/sanitized_build.sh"
build="$sanitized_build"
sanitized_build_targets oscar
[[ -f "$OSCAR_MODEL" ]] || { echo "soak.sh: no model at $OSCAR_MODEL (scripts/setup.sh)" >&2; exit 1; }
exec "$OSCAR_VENV/bin/python" bench/serve_soak.py --oscar "$build/oscar" --model "$OSCAR_MODEL" \
  --text "$OSCAR_EVAL_TEXT" "$@"
