#!/usr/bin/env bash
# Every crafted bad file in tests/data/crafted/ (tests/reference/make_crafted_corpus.py: one
# per known class of broken GGUF, safetensors and .pt files) must be refused cleanly: exit 1,
# one `error:` line that names the file and the field (expectations.json), within 10 s and
# under a 4 GB address-space limit. good.gguf, the control, must load and generate.
#   tests/cli/crafted_test.sh path/to/oscar
set -uo pipefail
bin="$1"
dir="$(cd "$(dirname "$0")/../data/crafted" && pwd)"
failed=0 n=0
while IFS=$'\t' read -r name cmd expect; do
  f="$dir/$name"
  case $cmd in
    run) args=(run -m "$f" -p hi -n 2 -t 1) ;;
    inspect) args=(inspect "$f") ;;
    rotations) args=(rotations inspect "$f") ;;
  esac
  err=$( (ulimit -v 4000000; timeout 10 "$bin" "${args[@]}" 2>&1 >/dev/null) )
  rc=$?
  n=$((n + 1))
  first=$(printf '%s\n' "$err" | head -1)
  if [[ $name == good.gguf ]]; then
    [[ $rc == 0 ]] || { echo "FAIL $name: the control did not load (exit $rc): $first"; failed=1; }
    continue
  fi
  if [[ $rc != 1 || $first != error:* || $first != *"$f"* || $first != *"$expect"* ]]; then
    echo "FAIL $name: exit $rc (want 1), want an error naming $f and '$expect', got: $first"
    failed=1
  fi
done < <(python3 -c '
import json, sys
for k, v in sorted(json.load(open(sys.argv[1])).items()): print(k, v["cmd"], v["expect"], sep="\t")' "$dir/expectations.json")
[[ $n -ge 40 ]] || { echo "FAIL: only $n crafted cases"; failed=1; }
[[ $failed == 0 ]] && echo "crafted: $n cases, each refused with a clean error naming the file and the field"
exit $failed
