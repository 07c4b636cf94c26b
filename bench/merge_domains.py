#!/usr/bin/env python3
"""Puts bench/kv_modes.sh rows of several domains side by side (bench/domains.sh): one row per KV
mode with PPL / BF16 and mean KLD per domain, then the worst domain and the mean over domains, and
the effective bits (the mean over domains; they differ only through the texts' token counts).

    python bench/merge_domains.py OUT_PREFIX DOMAIN=ROWS.json ...
"""
import datetime
import json
import subprocess
import sys

out, parts = sys.argv[1], sys.argv[2:]
domains, rows = [], {}
for p in parts:
    domain, path = p.split("=", 1)
    domains.append(domain)
    for r in json.load(open(path)):
        rows.setdefault(r["kv"], {})[domain] = r


def num(x):
    try:
        return float(x)
    except (TypeError, ValueError):
        return None


table = []
for kv, by in rows.items():
    ratio = {d: num(by[d].get("ppl_ratio_bf16")) for d in domains if d in by}
    kld = {d: num(by[d].get("kld_mean")) for d in domains if d in by}
    bits = [num(by[d].get("bits_per_element")) for d in domains if d in by]
    known = [d for d in domains if ratio.get(d) is not None]
    worst = max(known, key=lambda d: ratio[d]) if known else None
    table.append({
        "kv": kv, "ctx": next(iter(by.values())).get("ctx"),
        "bits_per_element": round(sum(b for b in bits if b) / max(1, len([b for b in bits if b])), 3) if bits else None,
        "ppl_ratio_bf16": ratio, "kld_mean": kld,
        "worst_domain": worst, "worst_ppl_ratio": ratio.get(worst) if worst else None,
        "worst_kld": max((kld[d] for d in kld if kld[d] is not None), default=None),
        "mean_ppl_ratio": sum(ratio[d] for d in known) / len(known) if known else None,
        "mean_kld": (sum(kld[d] for d in known if kld.get(d) is not None) / len(known)) if known else None,
        "rows": by,
    })
json.dump(table, open(out + ".json", "w"), indent=1)


def f(x, digits=4):
    return "-" if x is None else f"{x:.{digits}f}"


head = "| KV | bits | " + " | ".join(f"{d} PPL/BF16 | {d} KLD" for d in domains) + \
       " | worst domain | worst PPL/BF16 | worst KLD | mean PPL/BF16 | mean KLD |"
lines = [head, "|" + "---|" * (2 + 2 * len(domains) + 5)]
for t in table:
    cells = [t["kv"], f(t["bits_per_element"], 3)]
    for d in domains:
        cells += [f(t["ppl_ratio_bf16"].get(d)), f(t["kld_mean"].get(d))]
    cells += [t["worst_domain"] or "-", f(t["worst_ppl_ratio"]), f(t["worst_kld"]), f(t["mean_ppl_ratio"]),
              f(t["mean_kld"])]
    lines.append("| " + " | ".join(cells) + " |")
try:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
except OSError:
    commit = "unknown"
lines.append(f"\n{', '.join(domains)}; merged at commit {commit}, {datetime.date.today().isoformat()}")
open(out + ".md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
