#!/usr/bin/env python3
"""Prefill of one prompt with HF transformers + PyTorch SDPA at a named shape (random BF16
weights), the peer `bench/cuda/prefill_vs_hf.sh` runs beside `oscar bench --device cuda`.

One forward over the whole prompt (batch 1, no KV cache kept, logits of the last token
only, as oscar's prefill gives), warm-up then the median of --reps; and, in the same
process, a plain BF16 matmul's TFLOP/s (8192³), the ceiling the attention target is a
fraction of. Prints one JSON row per length: {"bench": "prefill", "engine": "hf", ...}.
"""
import argparse
import json
import statistics
import time

import torch

SHAPES = {  # config.json values of the real models
    "qwen3-8b": dict(num_hidden_layers=36, hidden_size=4096, intermediate_size=12288, num_attention_heads=32,
                     num_key_value_heads=8, head_dim=128, vocab_size=151936),
    "qwen3-32b": dict(num_hidden_layers=64, hidden_size=5120, intermediate_size=25600, num_attention_heads=64,
                      num_key_value_heads=8, head_dim=128, vocab_size=151936),
}


def matmul_tflops(n=8192, reps=20):
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(reps):
        a @ b
    torch.cuda.synchronize()
    return 2 * n**3 * reps / (time.perf_counter() - t) / 1e12


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="qwen3-8b", choices=sorted(SHAPES))
    ap.add_argument("--lengths", default="8192,32768")
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    from transformers import Qwen3Config, Qwen3ForCausalLM

    cfg = Qwen3Config(**SHAPES[a.shape], max_position_embeddings=40960, rope_theta=1e6, rms_norm_eps=1e-6,
                      tie_word_embeddings=False, attn_implementation="sdpa", torch_dtype=torch.bfloat16)
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = Qwen3ForCausalLM(cfg).to(torch.bfloat16).eval()
    mm = matmul_tflops()
    n_params = sum(p.numel() for p in model.parameters())
    for T in [int(x) for x in a.lengths.split(",")]:
        ids = torch.randint(0, cfg.vocab_size, (1, T), device="cuda")
        times = []
        with torch.inference_mode():
            for i in range(a.reps + 1):
                torch.cuda.synchronize()
                t = time.perf_counter()
                model(input_ids=ids, use_cache=False, logits_to_keep=1)
                torch.cuda.synchronize()
                if i > 0:
                    times.append(time.perf_counter() - t)
        s = statistics.median(times)
        L, H, d = cfg.num_hidden_layers, cfg.num_attention_heads, cfg.head_dim
        flops = 2 * (n_params - 2 * cfg.vocab_size * cfg.hidden_size) * T + 2 * L * H * d * T * T  # causal attention: half of 4·T²·d
        print(json.dumps({"bench": "prefill", "engine": "hf", "shape": a.shape, "T": T, "kv": "bf16",
                          "tokens_per_s": round(T / s, 1), "seconds": round(s, 4), "tflops": round(flops / s / 1e12, 1),
                          "matmul_tflops": round(mm, 1), "torch": torch.__version__}), flush=True)


if __name__ == "__main__":
    main()
