#!/usr/bin/env python3
"""Merges JSON rows from several bench/kv_modes.sh runs of one model and context (say a
first run and extra modes run later) into OUT.json and a Markdown table OUT.md, in the
order given; a mode that appears twice keeps its last row.

    python bench/merge_kv_modes.py OUT_PREFIX a.json b.json ...
"""
import datetime
import json
import subprocess
import sys

out, files = sys.argv[1], sys.argv[2:]
rows = {}
for f in files:
    for r in json.load(open(f)):
        rows.pop(r["kv"], None)
        rows[r["kv"]] = r
rows = list(rows.values())
json.dump(rows, open(out + ".json", "w"), indent=1)
cols = ["kv", "ctx", "bits_per_element", "ppl", "ppl_stderr", "ppl_ratio_bf16", "ppl_ratio_stderr", "kld_mean",
        "kld_stderr", "kld_p99", "same_top1_pct"]
lines = ["| KV | ctx | bits/element | PPL | ± | PPL / BF16 | ± | mean KLD | ± | 99% KLD | same top-1 % |",
         "|---|---|---|---|---|---|---|---|---|---|---|"]
for r in rows:
    lines.append("| " + " | ".join("-" if r.get(c) is None else str(r[c]) for c in cols) + " |")
try:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
except OSError:
    commit = "unknown"
lines.append(f"\nmerged from {', '.join(files)} at commit {commit}, {datetime.date.today().isoformat()}")
open(out + ".md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
