#!/usr/bin/env python3
"""PyTorch scaled_dot_product_attention over a BF16 KV cache at the shapes of
bench_decode_attention (Qwen3-8B layer: 32 query heads, 8 KV heads, head_dim 128; one query
token per sequence), per backend (cuDNN, flash), as the baseline beside our kernel.

Rows carry B, T, kv, backend, ms (median of --iters launches, L2 flushed before each),
bytes (K and V read once, q read, out written), GB/s and frac_of_copy against a
device-to-device copy measured in this process (read + write bytes / time), as the C++
benchmark counts it.
  python3 bench/cuda/sdpa_baseline.py --json OUT.json [--commit SHA] [--iters N]
"""
import argparse
import datetime
import json
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

HEADS, KV_HEADS, DIM = 32, 8, 128
SHAPES = [(1, 8192), (1, 32768), (1, 131072), (8, 32768), (32, 32768), (64, 8192)]
BACKENDS = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}


def median_ms(fn, iters, flush):
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for _ in range(3):
        fn()
    for i in range(iters):
        flush()
        starts[i].record()
        fn()
        ends[i].record()
    torch.cuda.synchronize()
    times = sorted(s.elapsed_time(e) for s, e in zip(starts, ends))
    return times[len(times) // 2]


def copy_gbps(iters, flush):
    n = 1 << 30
    src = torch.ones(n, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    ms = median_ms(lambda: dst.copy_(src), iters, flush)
    return 2.0 * n / (ms * 1e-3) / 1e9


def measure(batch, seq, backend, iters, flush, copy):
    row = {"B": batch, "T": seq, "kv": "bf16", "backend": backend, "ms": None, "bytes": None,
           "gbps": None, "frac_of_copy": None, "note": ""}
    try:
        q = torch.randn(batch, HEADS, 1, DIM, dtype=torch.bfloat16, device="cuda")
        k = torch.randn(batch, KV_HEADS, seq, DIM, dtype=torch.bfloat16, device="cuda")
        v = torch.randn_like(k)
    except torch.OutOfMemoryError:
        row["note"] = "skipped: does not fit in device memory"
        return row
    kv_bytes = 2 * k.numel() * k.element_size()
    try:
        with sdpa_kernel([BACKENDS[backend]]):
            fn = lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True)  # noqa: E731
            fn()
            torch.cuda.synchronize()
            row["ms"] = median_ms(fn, iters, flush)
    except (RuntimeError, torch.OutOfMemoryError) as e:  # the backend refuses GQA or the shape
        row["note"] = f"refused with enable_gqa: {str(e).splitlines()[0][:160]}"
        try:  # K and V expanded to every query head: 4x the bytes, what a caller would do
            ke = k.repeat_interleave(HEADS // KV_HEADS, dim=1)
            ve = v.repeat_interleave(HEADS // KV_HEADS, dim=1)
            with sdpa_kernel([BACKENDS[backend]]):
                fn = lambda: F.scaled_dot_product_attention(q, ke, ve)  # noqa: E731
                fn()
                torch.cuda.synchronize()
                row["ms"] = median_ms(fn, iters, flush)
            kv_bytes = 2 * ke.numel() * ke.element_size()
            row["note"] += "; timed with K/V expanded to 32 heads"
            del ke, ve
        except (RuntimeError, torch.OutOfMemoryError) as e2:
            row["note"] += f"; expanded K/V also failed: {str(e2).splitlines()[0][:160]}"
    if row["ms"] is not None:
        row["bytes"] = kv_bytes + 2 * q.numel() * q.element_size()
        row["gbps"] = row["bytes"] / (row["ms"] * 1e-3) / 1e9
        row["frac_of_copy"] = row["gbps"] / copy
    del q, k, v
    torch.cuda.empty_cache()
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", required=True)
    ap.add_argument("--commit", default="unknown")
    ap.add_argument("--iters", type=int, default=25)
    ap.add_argument("--flush", choices=["read", "write"], default="read",
                    help="empty the L2 before each launch by reading a buffer twice its size (no dirty "
                         "lines left to write back during the timed launch) or by writing it")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device", file=sys.stderr)
        return 1
    prop = torch.cuda.get_device_properties(0)
    flush_buf = torch.zeros(2 * max(prop.L2_cache_size, 64 << 20) // 4, dtype=torch.float32, device="cuda")
    sink = torch.empty((), dtype=torch.float32, device="cuda")
    if args.flush == "read":
        def flush():
            torch.sum(flush_buf, dim=0, out=sink)  # reads the buffer, writes one float
    else:
        def flush():
            flush_buf.add_(1)
    copy = copy_gbps(args.iters, flush)
    print(f"device {prop.name}; torch {torch.__version__}; cuDNN {torch.backends.cudnn.version()}")
    print(f"copy bandwidth (D2D 1 GiB, read+write bytes / time): {copy:.1f} GB/s")
    print(f"{'B':>4} {'T':>7} {'backend':>7} {'ms':>10} {'GB/s':>9} {'frac':>6}  note")
    rows = []
    for batch, seq in SHAPES:
        for backend in BACKENDS:
            r = measure(batch, seq, backend, args.iters, flush, copy)
            rows.append(r)
            if r["ms"] is None:
                print(f"{batch:4d} {seq:7d} {backend:>7} {'-':>10} {'-':>9} {'-':>6}  {r['note']}")
            else:
                print(f"{batch:4d} {seq:7d} {backend:>7} {r['ms']:10.4f} {r['gbps']:9.1f} {r['frac_of_copy']:6.3f}  "
                      f"{r['note']}")
    out = {
        "benchmark": "torch scaled_dot_product_attention decode over BF16 KV (baseline)",
        "device": prop.name,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "commit": args.commit,
        "command": " ".join(sys.argv),
        "torch": torch.__version__,
        "cudnn": torch.backends.cudnn.version(),
        "copy_gbps": copy,
        "shape": {"n_heads": HEADS, "n_kv_heads": KV_HEADS, "head_dim": DIM, "queries_per_sequence": 1},
        "flush": args.flush,
        "rows": rows,
    }
    with open(args.json, "w") as f:
        json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
