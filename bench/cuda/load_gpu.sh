#!/usr/bin/env bash
# Weights straight to the device, measured on a GPU machine with no network, from the repo
# root with .device/ carried (scripts/device_bundle.sh): `oscar serve --device cuda` on a
# random model at a real shape, from start to ready, its peak host RSS (VmHWM), the
# loader's own time and bytes, and one completion through HTTP; then the server is stopped.
# Shapes, one or more:
#   8b    Qwen3-8B shape, BF16 GGUF (16.4 GB): bf16 and int2-hadamard (R_V = H folded into W_v /
#         W_o on the device) at a 40 GiB KV budget
#   32b   Qwen3-32B shape, Q8_0 GGUF (34.8 GB, dequantized to BF16 on the device; a BF16 file
#         would not fit a 64 GiB disk): bf16 and int2-hadamard at a 60 GiB KV budget
# LOAD_CALIB=1 also calibrates OSCAR rotations on the host's CPU (CALIB_TOKENS, 512, in two
# prompts; its time and peak RSS as a "calibrate" row) and serves int2-oscar with them.
# Rows {"bench": "load", "shape", "kv", "file_gb", "seconds", "ready_seconds", "host_rss_gb", ...}
# go to $OUT/load_gpu.json with device, date, commit and command. The model file is read
# once before the first server (cat > /dev/null), so the figures are "from the page cache".
set -uo pipefail
cd "$(dirname "$0")/../.."
source bench/cuda/device_env.sh  # $bin, $out, wait_ready
rows="$out/load_gpu_rows.jsonl"
: > "$rows"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
df -h /tmp | tail -1

peak_rss_kb() {  # pid → "VmHWM RssAnon" in kB, the largest seen until it exits (polled): the
  # peak counts the mapped model file's pages (page cache, reclaimable), RssAnon what is the process's own
  local pid="$1" hwm=0 anon=0 v a
  while kill -0 "$pid" 2>/dev/null; do
    read -r v a < <(awk '/VmHWM/ {h=$2} /RssAnon/ {a=$2} END {print h+0, a+0}' "/proc/$pid/status" 2>/dev/null || echo "0 0")
    [[ -n "$v" && "$v" -gt "$hwm" ]] && hwm=$v
    [[ -n "$a" && "$a" -gt "$anon" ]] && anon=$a
    sleep 0.2
  done
  echo "$hwm $anon"
}

calibrate() {  # shape model rot_dir: a short calibration on the host's CPU, its time and peak RSS
  local shape="$1" model="$2" rot="$3" log="$out/calib_${1}.log" t0 hwm
  t0=$(date +%s.%N)
  "$bin" calibrate -m "$model" -f .device/data/calib.txt --tokens "${CALIB_TOKENS:-512}" --prompts 2 --no-clip-search \
    -o "$rot" -t "$(nproc)" > "$log" 2>&1 &
  local pid=$!
  hwm=$(peak_rss_kb "$pid")
  wait "$pid"; local rc=$?
  tail -3 "$log"
  python3 - "$shape" "$model" "$t0" "$(date +%s.%N)" "$rc" "${CALIB_TOKENS:-512}" $hwm >> "$rows" <<'PY'
import json, os, sys
shape, model, t0, t1, rc, tokens, hwm_kb, anon_kb = sys.argv[1:]
print(json.dumps({"bench": "calibrate", "shape": shape, "file_gb": round(os.path.getsize(model) / 1e9, 2),
                  "tokens": int(tokens), "seconds": round(float(t1) - float(t0), 1),
                  "host_rss_gb": round(int(hwm_kb) * 1024 / 1e9, 3),
                  "host_rss_anon_gb": round(int(anon_kb) * 1024 / 1e9, 3), "exit": int(rc)}))
PY
  tail -1 "$rows"
  return "$rc"
}

measure() {  # shape model kv_mem_mib kv [extra serve flags]
  local shape="$1" model="$2" kv_mem="$3" kv="$4" log="$out/load_${1}_${4}.log"
  shift 4
  local t0 t1 port hwm
  t0=$(date +%s.%N)
  "$bin" serve -m "$model" --device cuda --kv "$kv" "$@" -c 32768 --max-seqs 64 --kv-mem "$kv_mem" --port 0 \
    --model-name "$shape" > "$log" 2>&1 &
  local pid=$!
  port=$(wait_ready "$log" "$pid") || { kill "$pid" 2>/dev/null; return 1; }
  t1=$(date +%s.%N)
  grep -E "engine:|fit at once" "$log"
  local reply
  reply=$(python3 - "$port" "$shape" <<'PY'
import json, sys, time, urllib.request
port, shape = sys.argv[1], sys.argv[2]
body = json.dumps({"model": shape, "prompt": "the quick brown fox", "max_tokens": 16, "temperature": 0}).encode()
t = time.time()
r = json.load(urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body,
                                                            {"Content-Type": "application/json"}), timeout=120))
print(json.dumps({"completion_tokens": r["usage"]["completion_tokens"], "seconds": round(time.time() - t, 3)}))
PY
  ) || reply='{"error": "request failed"}'
  echo "completion: $reply"
  hwm=$(awk '/VmHWM/ {print $2}' "/proc/$pid/status")
  kill -TERM "$pid"; wait "$pid"; echo "server exit: $?"
  python3 - "$log" "$shape" "$kv" "$model" "$hwm" "$t0" "$t1" "$reply" >> "$rows" <<'PY'
import json, os, re, sys
log, shape, kv, model, hwm_kb, t0, t1, reply = sys.argv[1:]
text = open(log).read()
m = re.search(r"BF16 weights ([0-9.]+) GiB \(streamed from ([0-9.]+) GiB stored in ([0-9.]+) s\)", text)
row = {"bench": "load", "shape": shape, "kv": kv, "file_gb": round(os.path.getsize(model) / 1e9, 2),
       "seconds": float(m.group(3)) if m else None, "device_weights_gib": float(m.group(1)) if m else None,
       "ready_seconds": round(float(t1) - float(t0), 2), "host_rss_gb": round(int(hwm_kb) * 1024 / 1e9, 3),
       "completion": json.loads(reply)}
print(json.dumps(row))
PY
  tail -1 "$rows"
}

for phase in "$@"; do
  case "$phase" in
    8b)  shape=qwen3-8b;  type=bf16; kv_mem=40960 ;;
    32b) shape=qwen3-32b; type=q8_0; kv_mem=61440 ;;
    *) echo "load_gpu.sh: unknown shape '$phase' (8b, 32b)" >&2; exit 2 ;;
  esac
  model="/tmp/oscar-$shape-$type.gguf"
  t0=$(date +%s)
  [[ -f "$model" ]] || "$bin" make-model --shape "$shape" --type "$type" -o "$model" || exit 1
  echo "== $shape ($type): written in $(( $(date +%s) - t0 )) s, $(du -h "$model" | cut -f1)"
  cat "$model" > /dev/null
  for kv in ${LOAD_KVS:-bf16 int2-hadamard}; do measure "$shape" "$model" "$kv_mem" "$kv"; done
  if [[ -n "${LOAD_CALIB:-}" ]]; then  # OSCAR rotations fitted on the host, then served with them
    rot="/tmp/oscar-$shape-rot"
    calibrate "$shape" "$model" "$rot" && measure "$shape" "$model" "$kv_mem" int2-oscar --rotations "$rot"
  fi
  [[ -n "${KEEP_MODELS:-}" ]] || rm -f "$model"
done

python3 - "$rows" "$out/load_gpu.json" "${OSCAR_COMMIT:-unknown}" "bash bench/cuda/load_gpu.sh $*" <<'PY'
import datetime, json, subprocess, sys
rows_path, out, commit, command = sys.argv[1:]
gpu = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
rows = [json.loads(l) for l in open(rows_path) if l.strip()]
json.dump({"device": gpu, "date": datetime.date.today().isoformat(), "commit": commit, "command": command, "rows": rows},
          open(out, "w"), indent=1)
print(open(out).read())
PY
