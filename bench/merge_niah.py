"""Merges per-mode `oscar niah --json` files into OUT.json and a Markdown table OUT.md:
one row per KV mode, one column per (length, depth) cell, hits/trials in each."""
import datetime
import json
import sys

out, commit, files = sys.argv[1], sys.argv[2], sys.argv[3:]
runs = [json.load(open(f)) for f in files]
for r, f in zip(runs, files):  # the mode as niah_modes.sh named it ("int2-oscar@DIR" keeps DIR's name)
    r["label"] = f[len(out) + 1:-len(".json")] if f.startswith(out + ".") else r["kv"]
cells = sorted({(c["length"], c["depth"]) for r in runs for c in r["cells"]})
lines = ["| KV | bits/element | " + " | ".join(f"{l}@{d:g}%" for l, d in cells) + " | hits |",
         "|---|---|" + "---|" * len(cells) + "---|"]
for r in runs:
    by = {(c["length"], c["depth"]): c for c in r["cells"]}
    row = [f"{by[k]['correct']}/{by[k]['trials']}" if k in by else "-" for k in cells]
    lines.append(f"| {r['label']} | {r['bits_per_element']:.3f} | " + " | ".join(row) + f" | {r['correct']}/{r['total']} |")
date = datetime.date.today().isoformat()
lines.append(f"\nmodel {runs[0]['model']}, bits/element at the longest length, commit {commit}, {date}")
open(out + ".md", "w").write("\n".join(lines) + "\n")
json.dump({"commit": commit, "date": date, "runs": runs}, open(out + ".json", "w"), indent=1)
print("\n".join(lines))
