#!/usr/bin/env python3
"""Plot perplexity (as a ratio to BF16 KV) against effective bits per element for every
KV mode, from the JSON rows bench/kv_modes.sh writes.

    python bench/plot_kv_modes.py bench/results/kv_modes_smollm2_ctx4096.json [...] -o docs/ppl_vs_bits.png
"""
import argparse
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("inputs", nargs="+", help="JSON files from bench/kv_modes.sh")
    ap.add_argument("-o", "--out", required=True)
    args = ap.parse_args()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for path in args.inputs:
        rows = [r for r in json.load(open(path)) if r.get("ppl") and r.get("bits_per_element")]
        label = os.path.basename(path).replace("kv_modes_", "").replace(".json", "")
        xs = [r["bits_per_element"] for r in rows]
        ys = [r["ppl_ratio_bf16"] for r in rows]
        ax.scatter(xs, ys, label=label)
        for r, x, y in zip(rows, xs, ys):
            ax.annotate(r["kv"], (x, y), textcoords="offset points", xytext=(4, 3), fontsize=7)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("effective bits per K/V element (codes + scales + BF16 windows)")
    ax.set_ylabel("perplexity / perplexity with BF16 KV")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_title("KV cache formats: accuracy against memory (held-out text)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    print("wrote", args.out)


if __name__ == "__main__":
    main()
