#!/usr/bin/env bash
# End to end on the real default model: `oscar serve` (the OpenAI-compatible HTTP server)
# driven by the official openai client and raw httpx, checked against `oscar run`.
# Usage: run_server_test.sh path/to/oscar
set -uo pipefail
bin="$1"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/../../scripts/env.sh"
if [[ ! -f "$OSCAR_MODEL" || ! -f "$OSCAR_CALIB_TEXT" ]]; then
  if [[ "${OSCAR_REQUIRE_MODEL:-0}" == 1 ]]; then echo "0 passed, 1 failed (model or texts missing)"; exit 1; fi
  echo "0 passed, 0 failed, 1 skipped (model or texts missing)"; exit 0
fi
if [[ ! -x "$OSCAR_VENV/bin/python" ]]; then
  echo "0 passed, 1 failed (no Python venv at $OSCAR_VENV: scripts/requirements.txt installs it)"; exit 1
fi
extra=()
if [[ -f "$OSCAR_EVAL_TEXT" ]]; then extra=(--eval-text "$OSCAR_EVAL_TEXT"); fi
exec "$OSCAR_VENV/bin/python" "$here/server_test.py" --oscar "$bin" --model "$OSCAR_MODEL" \
  --calib-text "$OSCAR_CALIB_TEXT" "${extra[@]}"
