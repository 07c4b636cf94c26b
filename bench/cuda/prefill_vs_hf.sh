#!/usr/bin/env bash
# Prefill of one prompt at the Qwen3-8B shape, oscar beside HF transformers + PyTorch SDPA,
# in one run on a GPU machine (repo root, .device/ carried: scripts/device_bundle.sh).
# oscar: `oscar bench --device cuda` on a random BF16 GGUF (make-model), the whole prompt
# from an empty cache, bf16 and int2-hadamard KV (int2-oscar's kernels and costs; no
# calibration needed). HF: bench/cuda/hf_prefill.py, one forward, last-token logits.
# Rows {"bench": "prefill", "engine": "oscar" | "hf", "shape", "T", "kv", "tokens_per_s"}
# to $OUT/prefill_vs_hf.json with device, date, commit and command. LENGTHS (8192,32768).
set -uo pipefail
cd "$(dirname "$0")/../.."
source bench/cuda/device_env.sh  # $bin, $out, wait_ready
lengths="${LENGTHS:-8192,32768}"
rows="$out/prefill_rows.jsonl"; : > "$rows"
model=/tmp/oscar-qwen3-8b-bf16.gguf
[[ -f "$model" ]] || "$bin" make-model --shape qwen3-8b -o "$model" > /dev/null || exit 1
for kv in bf16 int2-hadamard; do
  "$bin" bench -m "$model" --device cuda --kv "$kv" -p "$lengths" -n 0 -r 3 --json "$out/oscar_$kv.json" 2>&1 | tail -4
  python3 - "$out/oscar_$kv.json" "$kv" >> "$rows" <<'PY'
import json, sys
path, kv = sys.argv[1:]
doc = json.load(open(path))
for r in (doc["rows"] if isinstance(doc, dict) else doc):
    if r.get("depth") and r.get("prefill_tokens_per_s"):
        print(json.dumps({"bench": "prefill", "engine": "oscar", "shape": "qwen3-8b", "T": r["depth"], "kv": kv,
                          "tokens_per_s": r["prefill_tokens_per_s"]}))
PY
done
python3 bench/cuda/hf_prefill.py --shape qwen3-8b --lengths "$lengths" >> "$rows" || echo "hf_prefill failed"
python3 - "$rows" "$out/prefill_vs_hf.json" "${OSCAR_COMMIT:-unknown}" "bash bench/cuda/prefill_vs_hf.sh" <<'PY'
import datetime, json, subprocess, sys
rows_path, out, commit, command = sys.argv[1:]
gpu = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
rows = [json.loads(l) for l in open(rows_path) if l.strip()]
hf = {r["T"]: r["tokens_per_s"] for r in rows if r["engine"] == "hf"}
for r in rows:
    if r["engine"] == "oscar" and r["T"] in hf:
        r["ratio_to_hf"] = round(r["tokens_per_s"] / hf[r["T"]], 3)
json.dump({"device": gpu, "date": datetime.date.today().isoformat(), "commit": commit, "command": command, "rows": rows},
          open(out, "w"), indent=1)
for r in rows: print(json.dumps(r))
PY
