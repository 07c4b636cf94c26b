#!/usr/bin/env python3
"""Plot PPL ratio to BF16 KV and mean KL divergence against effective bits per element
for every KV mode, one colour per input (model and context), from the JSON rows that
bench/kv_modes.sh writes.

    python bench/plot_kv_modes.py bench/results/kv_modes_*_ctx4096.json -o docs/ppl_vs_bits.png
"""
import argparse
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def label_of(path):
    return os.path.basename(path).replace("kv_modes_", "").replace(".json", "")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("inputs", nargs="+", help="JSON files from bench/kv_modes.sh")
    ap.add_argument("-o", "--out", required=True)
    args = ap.parse_args()
    panels = [("ppl_ratio_bf16", "perplexity / perplexity with BF16 KV"),
              ("kld_mean", "mean KL divergence to BF16 KV (nats)")]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8))
    for ax, (key, ylabel) in zip(axes, panels):
        for path in args.inputs:
            rows = [r for r in json.load(open(path))
                    if r.get(key) is not None and r.get("bits_per_element") and r["kv"] != "bf16"]
            if key == "kld_mean":
                rows = [r for r in rows if r[key] > 0]
            xs = [r["bits_per_element"] for r in rows]
            ys = [r[key] for r in rows]
            ax.scatter(xs, ys, label=label_of(path))
            for r, x, y in zip(rows, xs, ys):
                ax.annotate(r["kv"].replace("@seq20000_prompt40_", "@"), (x, y), textcoords="offset points", xytext=(4, 3), fontsize=7)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("effective bits per K/V element (codes + scales + BF16 windows)")
        ax.set_ylabel(ylabel)
        if key == "ppl_ratio_bf16":
            ax.axhline(1.0, color="grey", lw=0.8)
        ax.legend(fontsize=8)
    fig.suptitle("KV cache formats: accuracy against memory (held-out text; BF16 KV = 16 bits)")
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    print("wrote", args.out)


if __name__ == "__main__":
    main()
