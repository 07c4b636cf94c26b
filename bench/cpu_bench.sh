#!/usr/bin/env bash
# Prefill and decode tokens/s of the default model at 512 and 4096 tokens of context on
# this machine's CPU, written as JSON with machine, date, commit and command.
#   bench/cpu_bench.sh OUT.json [extra oscar bench flags]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/../scripts/env.sh"
out="$1"; shift
bin="${OSCAR_BIN:-$here/../$OSCAR_BUILD/oscar}"
cmd=("$bin" bench -m "$OSCAR_MODEL" -p 512,4096 -n 32 -r 2 --json "$out.rows" "$@")
"${cmd[@]}"
python3 - "$out" "$out.rows" "${cmd[*]}" <<'PY'
import json, platform, subprocess, sys, datetime, os
out, rows_path, command = sys.argv[1:]
rows = json.load(open(rows_path))
os.remove(rows_path)
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
doc = {"device": f"CPU: {cpu}, {os.cpu_count()} cores", "date": datetime.date.today().isoformat(),
       "commit": commit, "command": command.replace(os.path.expanduser("~"), "~"), "rows": rows}
json.dump(doc, open(out, "w"), indent=2)
print(json.dumps(doc, indent=2))
PY
