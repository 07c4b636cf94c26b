#!/usr/bin/env bash
# End to end on the real default model: calibrate OSCAR rotations on the calibration
# novel, then perplexity on the held-out novel at 1024 context for naive INT2, Hadamard
# INT2 and OSCAR INT2, asserting ppl(int2-oscar) < ppl(int2-hadamard) < ppl(int2).
# Usage: oscar_pipeline_test.sh path/to/oscar
set -uo pipefail
bin="$1"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/../../scripts/env.sh"
if [[ ! -f "$OSCAR_MODEL" || ! -f "$OSCAR_CALIB_TEXT" || ! -f "$OSCAR_EVAL_TEXT" ]]; then
  if [[ "${OSCAR_REQUIRE_MODEL:-0}" == 1 ]]; then echo "0 passed, 1 failed (model or texts missing)"; exit 1; fi
  echo "0 passed, 0 failed, 1 skipped (model or texts missing)"; exit 0
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$bin" calibrate -m "$OSCAR_MODEL" -f "$OSCAR_CALIB_TEXT" --tokens 4000 --prompts 8 -o "$tmp/rot" 2>&1 | tail -1
ppl() {  # kv mode -> perplexity
  "$bin" ppl -m "$OSCAR_MODEL" -f "$OSCAR_EVAL_TEXT" -c 1024 --chunks 2 --kv "$1" --rotations "$tmp/rot" 2>/dev/null \
    | sed -n 's/^Final estimate: .* = \([0-9.]*\) +\/- .*/\1/p'
}
declare -A p
for kv in bf16 int2 int2-hadamard int2-oscar; do
  p[$kv]="$(ppl "$kv")"
  echo "ppl($kv) = ${p[$kv]:-FAILED}"
done
pass=0 fail=0
expect() {  # description, python condition
  if python3 -c "import sys; sys.exit(0 if ($2) else 1)" 2>/dev/null; then pass=$((pass + 1)); echo "ok   $1"
  else fail=$((fail + 1)); echo "FAIL $1"; fi
}
expect "int2-oscar < int2-hadamard" "${p[int2-oscar]:-0} < ${p[int2-hadamard]:-0}"
expect "int2-hadamard < int2" "${p[int2-hadamard]:-0} < ${p[int2]:-0}"
expect "bf16 <= int2-oscar" "${p[bf16]:-1e9} <= ${p[int2-oscar]:-0}"
# The same rotations embedded in the GGUF give the same perplexity without --rotations.
"$bin" rotations inspect "$tmp/rot" | tail -1
"$bin" rotations embed -m "$OSCAR_MODEL" -r "$tmp/rot" -o "$tmp/model-oscar.gguf" 2>/dev/null
embedded="$("$bin" ppl -m "$tmp/model-oscar.gguf" -f "$OSCAR_EVAL_TEXT" -c 1024 --chunks 2 --kv int2-oscar 2>/dev/null \
  | sed -n 's/^Final estimate: .* = \([0-9.]*\) +\/- .*/\1/p')"
echo "ppl(int2-oscar, rotations embedded in the GGUF) = ${embedded:-FAILED}"
expect "embedded rotations = rotation directory" "'${embedded:-x}' == '${p[int2-oscar]:-y}'"
echo "$pass passed, $fail failed"
[[ $fail == 0 ]]
