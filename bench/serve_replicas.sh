#!/usr/bin/env bash
# Replicas of `oscar serve` behind sglang-router on this machine (bench/serve_replicas.py):
# installs the router (bench/router_requirements.txt, pinned) into $OSCAR_VENV if missing, then
# runs the repeated-documents workload with cache-aware routing and with round robin, each on
# fresh replicas, and appends the rows to bench/results/replicas_cpu_smollm2.json (or --out).
#   bench/serve_replicas.sh [--out FILE] [more serve_replicas.py arguments]
# CPU defaults: 2 replicas of the default model, 1 thread each (this machine has 2 cores),
# 4 documents of ~1000 tokens, 24 questions, 4 clients, 16 output tokens.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here/.."
source scripts/env.sh
out=bench/results/replicas_cpu_smollm2.json
args=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --out) out="$2"; shift 2 ;;
    *) args+=("$1"); shift ;;
  esac
done
if ! "$OSCAR_VENV/bin/python" -c "import sglang_router" 2>/dev/null; then
  echo "== installing sglang-router (bench/router_requirements.txt)" >&2
  timeout 900 "$OSCAR_VENV/bin/pip" install -q -r bench/router_requirements.txt
fi
bin="${OSCAR_BIN:-$OSCAR_BUILD/oscar}"
[[ -x "$bin" ]] || { echo "serve_replicas.sh: no oscar binary at $bin (scripts/build.sh)" >&2; exit 1; }
exec timeout 3600 "$OSCAR_VENV/bin/python" bench/serve_replicas.py --oscar "$bin" --model "$OSCAR_MODEL" \
  --replicas 2 --policies cache_aware,round_robin --workload docs --docs 4 --doc-tokens 1000 --requests 24 \
  --concurrency 4 --max-tokens 16 --serve-args "-t 1 -c 2048 --max-seqs 4 --kv int2-hadamard" --out "$out" \
  "${args[@]}"
