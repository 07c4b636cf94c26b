#!/usr/bin/env bash
# Serving throughput on this machine's CPU: oscar serve with BF16 and INT2-OSCAR KV at one KV
# byte budget (room for about 2 BF16 sequences of prompt + output), against llama-cpp-python's
# OpenAI server with F16 and Q8_0 KV, same model, threads, prompts and max_tokens. Load from
# bench/serve_load.py at concurrency 1, 2, 4, 8. Writes bench/results/serve_cpu_smollm2.json and
# prints a markdown table. Every server is stopped on exit; every step has a timeout; the whole
# run stops at 25 minutes.
#   bench/serve_cpu.sh            the benchmark (prompts ~2000 tokens, 64 output tokens): the
#                                 sequences one budget admits; prefill-bound on 2 cores
#   bench/serve_cpu.sh --decode   decode-bound: prompts ~256 tokens, 128 output tokens, one
#                                 request per client, to bench/results/serve_cpu_smollm2_decode.json
#   bench/serve_cpu.sh --smoke    concurrency 1 and 2, 2 requests each, prompts ~300, 16 tokens,
#                                 written to ${TMPDIR:-/tmp}/serve_cpu_smollm2_smoke.json
#   bench/serve_cpu.sh --out FILE
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here/.."
source scripts/env.sh
invoked="bench/serve_cpu.sh $*"
load_at_start="$(cut -d' ' -f1-3 /proc/loadavg)"  # 1, 5, 15 min: the numbers mean little on a busy machine

smoke=0
out=bench/results/serve_cpu_smollm2.json
while [[ $# -gt 0 ]]; do
  case "$1" in
    --smoke) smoke=1; out="${TMPDIR:-/tmp}/serve_cpu_smollm2_smoke.json"; shift ;;
    --decode) smoke=2; out=bench/results/serve_cpu_smollm2_decode.json; shift ;;
    --out) out="$2"; shift 2 ;;
    *) echo "serve_cpu.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

threads=2
if [[ $smoke == 1 ]]; then
  prompt_tokens=300; max_tokens=16; concurrencies=(1 2); min_requests=2; per_conc_requests=1
elif [[ $smoke == 2 ]]; then
  prompt_tokens=256; max_tokens=128; concurrencies=(1 2 4 8); min_requests=1; per_conc_requests=1
  budget_seqs=8  # room for every client in BF16 too: how throughput grows with the batch
else
  # Long prompts: the INT2 history holds most of each sequence, as in the long-context use
  # this cache is for (a sequence's BF16 sink + recent window cost the same at any length).
  prompt_tokens=2000; max_tokens=64; concurrencies=(1 2 4 8); min_requests=4; per_conc_requests=2
fi
# SmolLM2's tokenizer gives ~3.8 characters a token on the eval text, so a prompt cut at 4
# characters a token is ~5 % longer than --prompt-tokens; the budget allows 10 %. BF16 pages
# hold 16 tokens of all layers: 16 × 23040 B (30 layers × K, V × 3 KV heads × 64 × 2 bytes).
page_tokens=16
page_bytes=$(( page_tokens * 23040 ))
seq_tokens=$(( prompt_tokens * 11 / 10 + max_tokens ))
budget_pages=$(( ${budget_seqs:-2} * ( (seq_tokens + page_tokens - 1) / page_tokens ) ))  # two BF16 sequences (default)
# -c is the sequence length the workload has: the server sizes its fp pool (sink and recent
# windows) for as many sequences of -c tokens as the budget holds.
ctx=$(( (seq_tokens + 63) / 64 * 64 ))
budget_tokens=$(( budget_pages * page_tokens ))
kv_mem_mib=$(python3 -c "import math; print(math.ceil($budget_pages * $page_bytes / 2**20 * 100) / 100)")

bin="${OSCAR_BIN:-$OSCAR_BUILD/oscar}"
py="$OSCAR_VENV/bin/python"
start_s=$SECONDS
total_s=1500  # 25 minutes for everything
budget_name=serve_cpu.sh
source bench/run_budget.sh
log_dir="$(mktemp -d "${TMPDIR:-/tmp}/serve_cpu.XXXXXX")"
pids=()
stop_pid() {  # SIGTERM, 10 s to drain, then SIGKILL
  local pid=$1
  kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
}
cleanup() { for pid in "${pids[@]}"; do stop_pid "$pid"; done; }
trap cleanup EXIT
trap 'exit 130' INT TERM

# 1. The peer, built once into the venv.
peer_note=""
if ! "$py" -c "import llama_cpp, llama_cpp.server, uvicorn, fastapi, sse_starlette, starlette_context, pydantic_settings" 2>/dev/null; then
  echo "== installing the peer (bench/peer_requirements.txt; compiles llama.cpp, several minutes)" >&2
  t0=$SECONDS
  CMAKE_ARGS="-DGGML_AVX2=on -DGGML_FMA=on -DGGML_F16C=on -DGGML_NATIVE=off" CMAKE_BUILD_PARALLEL_LEVEL=2 \
    timeout "$(step_timeout 1200)" "$OSCAR_VENV/bin/pip" install -r bench/peer_requirements.txt >"$log_dir/pip.log" 2>&1 ||
    { tail -30 "$log_dir/pip.log" >&2; exit 1; }
  peer_note="installed in this run ($(( SECONDS - t0 )) s)"
  start_s=$SECONDS  # the 25 minutes are for the benchmark itself
fi
peer_version=$("$py" -c "import llama_cpp; print(llama_cpp.__version__)")

# 2. OSCAR rotations: the cached default of scripts/quickstart.sh, else a quick fit.
model_stem="$(basename "$OSCAR_MODEL" .gguf)"
rot="$OSCAR_CACHE/rotations/$model_stem/$OSCAR_ROTATIONS_NAME"
rot_how="cached default: oscar calibrate --tokens 20000 --prompts 40 (clip search, key mean)"
if [[ ! -f "$rot/manifest.json" ]]; then
  rot="$OSCAR_CACHE/rotations/$model_stem/seq4000_prompt8_noclip_kmean"
  rot_how="quick fit: oscar calibrate --no-clip-search --tokens 4000 --prompts 8 (the default rotations were not cached)"
  if [[ ! -f "$rot/manifest.json" ]]; then
    echo "== calibrating quick rotations into $rot" >&2
    timeout "$(step_timeout 600)" "$bin" calibrate -m "$OSCAR_MODEL" -t "$threads" -f "$OSCAR_CALIB_TEXT" \
      --no-clip-search --tokens 4000 --prompts 8 -o "$rot" >"$log_dir/calibrate.log" 2>&1 ||
      { tail -30 "$log_dir/calibrate.log" >&2; exit 1; }
  fi
fi

rm -f "$out"
mkdir -p "$(dirname "$out")"
declare -A server_cmds=()

# One short request before measuring: a fresh server's first request pays one-time costs
# (seconds on oscar). Shorter than a 16-token page, so nothing of it is in a prefix cache.
warm_up() {
  curl -sf -o /dev/null --max-time "$(step_timeout 120)" "$base_url/v1/completions" -H 'Content-Type: application/json' \
    -d '{"model": "smollm2", "prompt": "It was a bright cold day in April, and", "max_tokens": 8, "temperature": 0}' ||
    { echo "serve_cpu.sh: $1: the warm-up request failed" >&2; exit 1; }
}

# Starts a server in the background; sets server_pid and base_url. $1: name, then the command.
start_server() {
  local name=$1; shift
  local log="$log_dir/$name.log" port=""
  server_cmds[$name]="$*"
  if [[ "$name" == llama* ]]; then
    port=$(python3 -c "import socket; s=socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
    set -- "$@" --port "$port"
  fi
  "$@" >"$log" 2>&1 &
  server_pid=$!
  pids+=("$server_pid")
  local wait_s
  wait_s=$(step_timeout 180)
  for _ in $(seq $(( wait_s * 5 ))); do
    kill -0 "$server_pid" 2>/dev/null || { echo "serve_cpu.sh: $name exited while starting:" >&2; tail -20 "$log" >&2; exit 1; }
    if [[ -z "$port" ]]; then
      local url
      url=$(grep -o 'listening on http://127\.0\.0\.1:[0-9]*' "$log" | head -1 | sed 's/listening on //') || true
      [[ -n "$url" ]] && { base_url=$url; warm_up "$name"; return 0; }
    elif curl -sf -o /dev/null "http://127.0.0.1:$port/v1/models"; then
      base_url="http://127.0.0.1:$port"; warm_up "$name"; return 0
    fi
    sleep 0.2
  done
  echo "serve_cpu.sh: $name not ready after ${wait_s}s:" >&2; tail -20 "$log" >&2; exit 1
}

# Runs the load at each concurrency against base_url. $1: server, $2: kv label, $3: name.
run_loads() {
  local server=$1 kv=$2 name=$3 c n t first=0
  for c in "${concurrencies[@]}"; do
    n=$(( per_conc_requests * c )); (( n < min_requests )) && n=$min_requests
    t=$(step_timeout 300)
    echo "== $name: concurrency $c, $n requests" >&2
    timeout $(( t + 20 )) "$py" bench/serve_load.py --base-url "$base_url" --model smollm2 \
      --prompts-file "$OSCAR_EVAL_TEXT" --prompt-tokens "$prompt_tokens" --max-tokens "$max_tokens" \
      --concurrency "$c" --requests "$n" --timeout "$t" --server "$server" --kv "$kv" \
      --first-prompt "$first" --out "$out" --label "$name-c$c"
    first=$(( first + n ))  # fresh prompts for each run: nothing in a server's prefix cache
  done
}

oscar_common=("$bin" serve -m "$OSCAR_MODEL" -t "$threads" --port 0 -c "$ctx" --max-seqs 16 --kv-mem "$kv_mem_mib"
  --model-name smollm2 --shutdown-timeout 5)
for kv in bf16 int2-oscar; do
  extra=()
  [[ $kv == int2-oscar ]] && extra=(--rotations "$rot")
  start_server "oscar-$kv" "${oscar_common[@]}" --kv "$kv" "${extra[@]}"
  grep -E '^(KV bytes per token|KV cache:)' "$log_dir/oscar-$kv.log" >&2 || true
  run_loads oscar "$kv" "oscar-$kv"
  stop_pid "$server_pid"
done

# llama-cpp-python: n_ctx = the tokens the byte budget holds at F16 (it runs one sequence at a
# time, so that is the one sequence's context); --interrupt_requests false, or a waiting
# request ends the streaming one early with [DONE]; logits_all off (the default computes the
# output layer for every prompt token).
llama_ctx=$budget_tokens
declare -A ggml_type=([f16]=1 [q8_0]=8)  # llama_cpp.GGML_TYPE_F16 / GGML_TYPE_Q8_0
for kv in f16 q8_0; do
  start_server "llama.cpp-$kv" "$py" -m llama_cpp.server --model "$OSCAR_MODEL" --model_alias smollm2 \
    --n_threads "$threads" --n_threads_batch "$threads" --n_ctx "$llama_ctx" --flash_attn true \
    --type_k "${ggml_type[$kv]}" --type_v "${ggml_type[$kv]}" --logits_all false --interrupt_requests false \
    --host 127.0.0.1
  run_loads llama.cpp "$kv" "llama.cpp-$kv"
  stop_pid "$server_pid"
done

# 4. The run's settings into the results file, and the table.
plan_lines="$(cd "$log_dir" && grep -HE '^(KV bytes per token|KV cache:)|llama_kv_cache: size =' oscar-*.log llama.cpp-*.log |
  sed 's|\.log:|: |' || true)"
for name in "${!server_cmds[@]}"; do printf '%s\t%s\n' "$name" "${server_cmds[$name]}"; done >"$log_dir/cmds.tsv"
"$py" - "$out" "$invoked" "$kv_mem_mib" "$budget_tokens" "$ctx" "$llama_ctx" "$rot" "$rot_how" "$peer_version" \
  "$peer_note" "$log_dir/cmds.tsv" "$plan_lines" "$smoke" "$load_at_start" <<'PY'
import json, os, sys
(out, invoked, kv_mem, budget_tokens, ctx, llama_ctx, rot, rot_how, peer_version, peer_note, cmds_path,
 plan_lines, smoke, load_at_start) = sys.argv[1:]
home = os.path.expanduser("~")
doc = json.load(open(out))
doc["command"] = invoked
doc["smoke"] = smoke == "1"
doc["mode"] = {"0": "admission (long prompts)", "1": "smoke", "2": "decode-bound"}[smoke]
doc["threads"] = 2
doc["load_avg_at_start"] = load_at_start
doc["kv_budget"] = {"oscar_kv_mem_mib": float(kv_mem), "bf16_tokens": int(budget_tokens), "oscar_ctx": int(ctx),
                    "llama_cpp_n_ctx": int(llama_ctx), "llama_cpp_n_ctx_note": "llama.cpp pads n_ctx up to a multiple of 256",
                    "plans": plan_lines.replace(home, "~").splitlines()}
doc["rotations"] = {"dir": rot.replace(home, "~"), "how": rot_how}
doc["peer"] = {"package": f"llama-cpp-python=={peer_version}", "requirements": "bench/peer_requirements.txt",
               "note": "llama-cpp-python's server serves one request at a time (one Llama object behind a lock): "
                       "concurrent requests queue, so sequences_admitted is 1 by construction (reported null)"
                       + (f"; {peer_note}" if peer_note else "")}
doc["servers"] = {}
for line in open(cmds_path):
    name, cmd = line.rstrip("\n").split("\t", 1)
    doc["servers"][name] = cmd.replace(home, "~")
tmp = out + ".tmp"
json.dump(doc, open(tmp, "w"), indent=2)
open(tmp, "a").write("\n")
os.replace(tmp, out)
cols = ["server", "kv", "concurrency", "requests", "failed", "output_tokens_per_s", "ttft_ms_p50", "ttft_ms_p99",
        "itl_ms_p50", "itl_ms_p99", "sequences_admitted", "prompt_tokens_measured_mean", "output_tokens_min"]
print(f"\n{doc['device']}, commit {doc['commit']}, {doc['date']}; KV budget {kv_mem} MiB "
      f"({budget_tokens} BF16 tokens); prompts ~{doc['rows'][0]['prompt_tokens']} tokens, "
      f"max_tokens {doc['rows'][0]['max_tokens']}; rotations: {rot_how}\n")
print("| " + " | ".join(cols) + " |")
print("|" + "---|" * len(cols))
for r in doc["rows"]:
    print("| " + " | ".join("" if r.get(c) is None else str(r.get(c)) for c in cols) + " |")
print(f"\nwritten: {out}")
PY
echo "server logs: $log_dir" >&2
