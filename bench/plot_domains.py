#!/usr/bin/env python3
"""Plot each KV mode's worst-domain and mean-domain KL divergence to BF16 KV against its
effective bits per element, one panel per model, from the merged JSON that
bench/domains.sh writes (bench/merge_domains.py).

    python bench/plot_domains.py bench/results/domains_smollm2_c4096.json \
        bench/results/domains_qwen25_c4096.json -o docs/ppl_vs_bits.png

Modes share bits (every INT2 format costs the same at a given length), so modes are told
apart by colour and marker in a legend, never by labels on the points: filled = worst
domain (named in the legend), hollow = mean over the domains, joined by a line.
"""
import argparse
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

MARKERS = "osD^vP*Xh<>"


def mode_label(kv):
    """int2-oscar@seq…_corpus -> int2-oscar (rotations: corpus); a plain mode as it is."""
    if "@" not in kv:
        return kv
    mode, rot = kv.split("@", 1)
    return f"{mode} (rotations: {'corpus' if rot.endswith('_corpus') else rot})"


def title_of(path, rows):
    name = os.path.basename(path).replace("domains_", "").replace(".json", "")
    ctx = rows[0].get("ctx", "?") if rows else "?"
    domains = sorted(rows[0]["kld_mean"]) if rows else []
    return f"{name}: {len(domains)} held-out domains, {ctx} tokens"


def plot_panel(ax, path, colours):
    rows = json.load(open(path))
    for i, r in enumerate(rows):
        if r["kv"] == "bf16":
            continue  # KLD 0 by definition, at 16 bits
        c = colours.setdefault(r["kv"], f"C{len(colours) % 10}")
        m = MARKERS[i % len(MARKERS)]
        bits, worst, mean = r["bits_per_element"], r["worst_kld"], r["mean_kld"]
        ax.plot([bits, bits], [mean, worst], color=c, lw=1.0, alpha=0.6)
        ax.scatter([bits], [worst], color=c, marker=m, s=60, zorder=3,
                   label=f"{mode_label(r['kv'])}: worst {r['worst_domain']} {worst:.3f}, mean {mean:.3f}")
        ax.scatter([bits], [mean], facecolors="none", edgecolors=c, marker=m, s=60, zorder=3)
    ax.set_yscale("log")
    ax.set_xlabel("effective bits per KV element")
    ax.set_ylabel("KL divergence to BF16 KV (nats)")
    ax.set_title(title_of(path, rows), fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7.5, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=1, frameon=False)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("inputs", nargs="+", help="merged JSON files from bench/domains.sh")
    ap.add_argument("-o", "--out", required=True)
    args = ap.parse_args()
    fig, axes = plt.subplots(1, len(args.inputs), figsize=(7.5 * len(args.inputs), 7.0), squeeze=False)
    colours = {}
    for ax, path in zip(axes[0], args.inputs):
        plot_panel(ax, path, colours)
    fig.suptitle("KV formats across held-out domains: filled = worst domain, hollow = mean of domains", fontsize=11)
    fig.tight_layout()
    fig.savefig(args.out, dpi=130)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
