#!/usr/bin/env bash
# ctest fixture: writes the NumPy reference's golden JSON for the default model into
# $1 (a build directory path), unless it is already there and newer than the scripts.
# Without the model it skips, or fails when OSCAR_REQUIRE_MODEL=1 (as scripts/test.sh sets).
set -euo pipefail
out="$1"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/../../scripts/env.sh"
if [[ ! -f "$OSCAR_MODEL" ]]; then
  if [[ "${OSCAR_REQUIRE_MODEL:-0}" == 1 ]]; then
    echo "golden: model $OSCAR_MODEL is missing (run scripts/setup.sh)" >&2; exit 1
  fi
  echo "golden: model $OSCAR_MODEL is missing; end-to-end tests will skip"; exit 0
fi
if [[ -f "$out" && "$out" -nt "$here/reference_forward.py" && "$out" -nt "$here/make_golden.py" \
      && "$out" -nt "$OSCAR_MODEL" && "$out" -nt "$here/../data/ppl_text.txt" ]]; then
  echo "golden: $out is up to date"; exit 0
fi
mkdir -p "$(dirname "$out")"
cd "$here/../.."
OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-2}" "$OSCAR_VENV/bin/python" tests/reference/make_golden.py \
  --model "$OSCAR_MODEL" --text tests/data/ppl_text.txt --out "$out.tmp"
mv "$out.tmp" "$out"
