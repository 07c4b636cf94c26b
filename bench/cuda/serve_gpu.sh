#!/usr/bin/env bash
# `oscar serve --device cuda` on a GPU machine with no network, from the repo root with
# .device/ carried (scripts/device_bundle.sh packs the binary built with CUDA, its libraries,
# the texts and the client wheels). Phases, run one or more:
#   test   the server test (tests/serve/server_test.py --device cuda) on a SmolLM2-shaped
#          model with random weights that `oscar make-model` writes here
#   model  a Qwen3-8B-shaped GGUF with random BF16 weights (/tmp/oscar-qwen3-8b.gguf) and
#          OSCAR rotations calibrated on it (/tmp/oscar-qwen3-8b-rot)
#   load   bench/serve_load.py against the server at one KV budget (--kv-mem, default 40 GiB),
#          32K-token prompts, bf16 then int2-oscar; rows to $OUT/serve_gpu_qwen3_8b.json
#   prefix int2-oscar with its prefix cache on and off: a shared document of SHARED_PREFIX_TOKENS
#          (30000) sent once, then CONC_PREFIX (16) concurrent prompts of it plus their own tokens;
#          rows to $OUT/serve_gpu_qwen3_8b_prefix.json
# Environment: OUT (results folder), KV_MEM_MIB (40960), PROMPT_TOKENS (32000), MAX_TOKENS (256),
# CONC_BF16 / CONC_INT2 (clients; default "fit": the sequences the server's KV plan says fit at
# once), LOAD_KVS ("bf16 int2-oscar"). With every client admitted at once and MAX_TOKENS long
# enough to outlast the prefills, the rows also give decode at full batch (full_batch_*).
set -uo pipefail
cd "$(dirname "$0")/../.."
source bench/cuda/device_env.sh  # $bin, $out, wait_ready
model=/tmp/oscar-qwen3-8b.gguf
rot=/tmp/oscar-qwen3-8b-rot
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
    model)
      echo "== Qwen3-8B shape, random BF16 weights"
      t0=$(date +%s)
      [[ -f "$model" ]] || "$bin" make-model --shape qwen3-8b -o "$model" || exit 1
      echo "written in $(( $(date +%s) - t0 )) s: $(du -h "$model" | cut -f1)"
      t0=$(date +%s)
      [[ -f "$rot/manifest.json" ]] || "$bin" calibrate -m "$model" -f .device/data/calib.txt --tokens 512 --prompts 2 \
        --no-clip-search -o "$rot" -t "$(nproc)" 2>&1 | tail -3
      echo "calibrated in $(( $(date +%s) - t0 )) s"
      ;;
    load)
      json="$out/serve_gpu_qwen3_8b.json"
      for kv in ${LOAD_KVS:-bf16 int2-oscar}; do
        extra=(); conc="${CONC_BF16:-fit}"
        if [[ $kv == int2-oscar ]]; then extra=(--rotations "$rot"); conc="${CONC_INT2:-fit}"; fi
        log="$out/serve_gpu_${kv}.log"
        t0=$(date +%s)
        "$bin" serve -m "$model" --device cuda --kv "$kv" "${extra[@]}" -c "$ctx" --max-seqs 64 --kv-mem "$kv_mem" \
          --step-tokens 1024 --port 0 --model-name qwen3-8b-random > "$log" 2>&1 &
        pid=$!
        port=$(wait_ready "$log" "$pid") || { kill "$pid" 2>/dev/null; continue; }
        echo "== $kv: ready in $(( $(date +%s) - t0 )) s on port $port"; grep -E "KV bytes|engine:" "$log"
        [[ $conc == fit ]] && conc=$(grep -o '[0-9]* fit at once' "$log" | grep -o '^[0-9]*')
        [[ -n "$conc" && "$conc" -ge 1 ]] || { echo "no concurrency for $kv" >&2; kill "$pid"; continue; }
        timeout 540 "$py" bench/serve_load.py --base-url "http://127.0.0.1:$port" --model qwen3-8b-random \
          --token-prompts 151000 --prompt-tokens "$prompt_tokens" --max-tokens "$max_tokens" \
          --concurrency "$conc" --requests "$conc" --timeout 500 --server oscar --kv "$kv" \
          --out "$json" --label "gpu-$kv" || echo "load run for $kv failed ($?)"
        kill -TERM "$pid"; wait "$pid"; echo "server exit: $?"
        tail -3 "$log"
      done
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
          --kv-mem "$kv_mem" --step-tokens 1024 --port 0 --model-name qwen3-8b-random > "$log" 2>&1 &
        pid=$!
        port=$(wait_ready "$log" "$pid") || { kill "$pid" 2>/dev/null; continue; }
        echo "== int2-oscar, prefix cache $cache: port $port"; grep -E "prefix cache:" "$log"
        common=(--base-url "http://127.0.0.1:$port" --model qwen3-8b-random --token-prompts 151000
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
