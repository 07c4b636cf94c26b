#!/usr/bin/env bash
# `oscar serve --device cuda` on a GPU machine with no network, from the repo root with
# .device/ carried (scripts/device_bundle.sh packs the binary built with CUDA, its libraries,
# the texts and the client wheels). Phases, run one or more:
#   test   the server test (tests/serve/server_test.py --device cuda) on a SmolLM2-shaped
#          model with random weights that `oscar make-model` writes here
#   soak   bench/serve_soak.py with the server under compute-sanitizer (SOAK_TOOL: memcheck, or
#          racecheck / synccheck; SOAK_SANITIZER_ARGS: more of its flags) on the random
#          SmolLM2-shaped model: SOAK_SECONDS (90) of 16
#          streaming clients over capacity, 30 % leaving mid-stream, 10 % malformed, 50 stalled;
#          the row to $OUT/soak_gpu_<tool>.json
#   model  a GGUF at $SHAPE with random weights (/tmp/oscar-$SHAPE.gguf: BF16 for qwen3-8b,
#          Q8_0 for qwen3-32b, whose BF16 file would not fit a 64 GiB disk; the device holds
#          both as BF16) and OSCAR rotations calibrated on it (/tmp/oscar-$SHAPE-rot)
#   load   bench/serve_load.py against the server at one KV budget (--kv-mem, default 40 GiB),
#          32K-token prompts, int2-oscar then bf16, both given the same request set: as many
#          requests as int2-oscar admits at once, all sent at once (BF16 queues the rest);
#          rows to $OUT/serve_gpu_<shape>.json, and in the issue's form to $OUT/serve_rows.json
#   prefix int2-oscar with its prefix cache on and off: a shared document of SHARED_PREFIX_TOKENS
#          (30000) sent once, then CONC_PREFIX (16) concurrent prompts of it plus their own tokens;
#          rows to $OUT/serve_gpu_qwen3_8b_prefix.json
# Environment: OUT (results folder), KV_MEM_MIB (40960), PROMPT_TOKENS (32000), MAX_TOKENS (256),
# STEP_TOKENS (4096: tokens per engine step), WORKLOAD (row label, "long-doc"), SHAPE (qwen3-8b
# or qwen3-32b), LOAD_TIMEOUT (580 s: one load run, its client included), CONC (requests, all
# sent at once; default "fit": what the first KV type's plan says fits at once, then the same
# for the others), LOAD_KVS ("int2-oscar bf16"). With every request admitted at once the rows
# also give decode at full batch (full_batch_*).
set -uo pipefail
cd "$(dirname "$0")/../.."
source bench/cuda/device_env.sh  # $bin, $out, wait_ready
shape="${SHAPE:-qwen3-8b}"
model="/tmp/oscar-$shape.gguf"
rot="/tmp/oscar-$shape-rot"
weight_type=bf16
[[ $shape == qwen3-32b ]] && weight_type=q8_0
served_name="$shape-random"
kv_mem="${KV_MEM_MIB:-40960}"
prompt_tokens="${PROMPT_TOKENS:-32000}"
max_tokens="${MAX_TOKENS:-256}"
ctx=$(( (prompt_tokens + max_tokens + 255) / 256 * 256 ))
py=python3
python3 -c "import openai, httpx" 2>/dev/null ||
  python3 -m pip install -q --no-index --find-links .device/wheels openai==3.57.0 httpx==0.28.1 || exit 1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader

for phase in "$@"; do
  case "$phase" in
    test)
      echo "== server test on the GPU (random SmolLM2-135M shape)"
      "$bin" make-model --shape smollm2-135m -o /tmp/oscar-smol.gguf || exit 1
      # --ctx 1024: the random model's tokenizer makes ~2.5 bytes a token, the real SmolLM2's ~4.
      "$py" tests/serve/server_test.py --oscar "$bin" --model /tmp/oscar-smol.gguf --device cuda --ctx 1024 \
        --calib-text .device/data/calib.txt --eval-text .device/data/eval.txt 2>&1 | tee "$out/serve_gpu_test.txt"
      ;;
    soak)
      tool="${SOAK_TOOL:-memcheck}"
      echo "== server soak on the GPU under compute-sanitizer $tool"
      [[ -f /tmp/oscar-smol.gguf ]] || "$bin" make-model --shape smollm2-135m -o /tmp/oscar-smol.gguf || exit 1
      "$py" bench/serve_soak.py --oscar "$bin" --model /tmp/oscar-smol.gguf --text .device/data/eval.txt --device cuda \
        --wrap "compute-sanitizer --tool $tool ${SOAK_SANITIZER_ARGS:-}" --seconds "${SOAK_SECONDS:-90}" --waves 2 --clients 16 --stalled 50 --kv-mem 400 \
        --max-rss-growth 0.2 --out "$out/soak_gpu_$tool.json" 2>&1 | tail -25
      ;;
    model)
      echo "== $shape, random $weight_type weights"
      t0=$(date +%s)
      [[ -f "$model" ]] || "$bin" make-model --shape "$shape" --type "$weight_type" -o "$model" || exit 1
      echo "written in $(( $(date +%s) - t0 )) s: $(du -h "$model" | cut -f1)"
      t0=$(date +%s)
      [[ -f "$rot/manifest.json" ]] || "$bin" calibrate -m "$model" -f .device/data/calib.txt --tokens 512 --prompts 2 \
        --no-clip-search -o "$rot" -t "$(nproc)" 2>&1 | tail -3
      echo "calibrated in $(( $(date +%s) - t0 )) s"
      ;;
    load)
      json="$out/serve_gpu_${shape//[-.]/_}.json"
      workload="${WORKLOAD:-long-doc}" conc="${CONC:-fit}"
      for kv in ${LOAD_KVS:-int2-oscar bf16}; do
        extra=()
        [[ $kv == int2-oscar ]] && extra=(--rotations "$rot")
        log="$out/serve_gpu_${workload}_${kv}.log"
        t0=$(date +%s)
        "$bin" serve -m "$model" --device cuda --kv "$kv" "${extra[@]}" -c "$ctx" --max-seqs 256 --kv-mem "$kv_mem" \
          --step-tokens "${STEP_TOKENS:-4096}" --port 0 --model-name "$served_name" > "$log" 2>&1 &
        pid=$!
        port=$(wait_ready "$log" "$pid") || { kill "$pid" 2>/dev/null; continue; }
        echo "== $workload, $kv: ready in $(( $(date +%s) - t0 )) s on port $port"; grep -E "KV bytes|engine:" "$log"
        fit=$(grep -o '[0-9]* fit at once' "$log" | grep -o '^[0-9]*')
        [[ $conc == fit ]] && conc=$fit  # the first KV type's count, kept for the others
        echo "requests (all at once): $conc; this KV type fits $fit at once"
        [[ -n "$conc" && "$conc" -ge 1 ]] || { echo "no concurrency for $kv" >&2; kill "$pid"; continue; }
        timeout "${LOAD_TIMEOUT:-580}" "$py" bench/serve_load.py --base-url "http://127.0.0.1:$port" --model "$served_name" \
          --token-prompts 151000 --prompt-tokens "$prompt_tokens" --max-tokens "$max_tokens" \
          --concurrency "$conc" --requests "$conc" --timeout $(( ${LOAD_TIMEOUT:-580} - 20 )) --server oscar --kv "$kv" \
          --out "$json" --label "gpu-$workload-$kv" || echo "load run for $kv failed ($?)"
        kill -TERM "$pid"; wait "$pid"; echo "server exit: $?"
        tail -3 "$log"
      done
      # The issue's rows: {"bench": "serve", "shape", "workload", "kv", "clients", whole run,
      # full batch, TTFT and ITL p50}, with the run's own fields beside them.
      python3 - "$json" "$out/serve_rows.json" "$shape" "$workload" "${OSCAR_COMMIT:-unknown}" <<'PY'
import datetime, json, os, subprocess, sys
src, dst, shape, workload, commit = sys.argv[1:]
doc = json.load(open(src))
rows = doc["rows"] if isinstance(doc, dict) else doc
out = json.load(open(dst)) if os.path.exists(dst) else None
if not out:
    gpu = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
    out = {"device": gpu, "date": datetime.date.today().isoformat(), "commit": commit,
           "command": "bash bench/cuda/serve_gpu.sh model load", "rows": []}
for r in rows:
    if not str(r.get("label", "")).startswith(f"gpu-{workload}-"):
        continue
    out["rows"].append({"bench": "serve", "shape": shape, "workload": workload, "kv": r.get("kv"),
                        "clients": r.get("concurrency"), "whole_run_tokens_per_s": r.get("output_tokens_per_s"),
                        "full_batch_tokens_per_s": r.get("full_batch_output_tokens_per_s"),
                        "ttft_p50": r.get("ttft_ms_p50"), "itl_p50": r.get("itl_ms_p50"), "run": r})
json.dump(out, open(dst, "w"), indent=1)
for r in out["rows"]:
    print(json.dumps({k: v for k, v in r.items() if k != "run"}))
PY
      ;;
    prefix)
      # The prefix cache under load: one long shared document (SHARED_PREFIX_TOKENS), sent once
      # alone, then CONC_PREFIX concurrent requests that each add their own question to it;
      # int2-oscar with the prefix cache on, then off (--no-prefix-cache), at the load KV budget.
      json="$out/serve_gpu_qwen3_8b_prefix.json"
      shared="${SHARED_PREFIX_TOKENS:-30000}" conc="${CONC_PREFIX:-16}"
      for cache in on off; do
        extra=(--rotations "$rot"); [[ $cache == off ]] && extra+=(--no-prefix-cache)
        log="$out/serve_gpu_prefix_${cache}.log"
        "$bin" serve -m "$model" --device cuda --kv int2-oscar "${extra[@]}" -c "$ctx" --max-seqs 64 \
          --kv-mem "$kv_mem" --step-tokens 1024 --port 0 --model-name "$served_name" > "$log" 2>&1 &
        pid=$!
        port=$(wait_ready "$log" "$pid") || { kill "$pid" 2>/dev/null; continue; }
        echo "== int2-oscar, prefix cache $cache: port $port"; grep -E "prefix cache:" "$log"
        common=(--base-url "http://127.0.0.1:$port" --model "$served_name" --token-prompts 151000
                --shared-prefix-tokens "$shared" --max-tokens "$max_tokens" --server oscar --kv int2-oscar)
        # The document alone (plus the two tokens a prompt keeps to compute): registered at its
        # own length, its recent window's fp pages are the ones a longer prompt's hit needs.
        timeout 200 "$py" bench/serve_load.py "${common[@]}" --prompt-tokens $(( shared + 2 )) --requests 1 \
          --concurrency 1 --timeout 180 --out "$json" --label "gpu-int2-oscar-prefix-$cache-document" || true
        timeout 540 "$py" bench/serve_load.py "${common[@]}" --prompt-tokens "$prompt_tokens" --first-prompt 1 \
          --requests "$conc" --concurrency "$conc" --timeout 500 --out "$json" \
          --label "gpu-int2-oscar-prefix-$cache" || echo "prefix run ($cache) failed ($?)"
        "$py" -c "import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1]).read().decode())" \
          "http://127.0.0.1:$port/metrics" | grep -E "^oscar_prefix_cache_(hits|queries)_total" || true
        kill -TERM "$pid"; wait "$pid"; echo "server exit: $?"
      done
      ;;
    *) echo "serve_gpu.sh: unknown phase '$phase' (test, model, load, prefix)" >&2; exit 2 ;;
  esac
done
