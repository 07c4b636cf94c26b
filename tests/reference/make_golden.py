#!/usr/bin/env python3
"""Write the golden JSON that oscar's C++ end-to-end tests compare against.

    python tests/reference/make_golden.py --model M.gguf \
        --text tests/data/ppl_text.txt --out build/golden/smollm2.json

Everything comes from reference_forward.py (independent NumPy reference).
Layout of the JSON (all ids are ints, all logits float32 values printed with 7
significant digits):

  model, model_sha256, model_bytes, arch, command, generator, elapsed_s, cpu_s
  prompt, prompt_ids, last_logits, logits_positions, greedy_ids, greedy_text,
  greedy_margins                   -- the first prompt (short plain text)
  cases: [ {name, prompt, prompt_ids, last_logits, logits_positions,
            greedy_ids, greedy_text, greedy_margins}, ... ]
                                   -- every prompt, the first one included
  ppl_ctx, ppl_chunks, ppl_token_ids ([chunk][N] ids), ppl_text_file,
  ppl_text_n_tokens, ppl_add_bos, ppl_scored_per_chunk, ppl_chunk_nll (mean NLL per
  chunk), ppl_running (running PPL after each chunk), ppl, ppl_stderr, ppl_mean_nll

logits_positions[t] = {pos, top_ids (5), top_logits (5)} for every prompt position.
greedy_ids: exactly n_greedy argmax tokens after the prompt (EOS is not special).
greedy_margins: top-1 minus top-2 logit at each greedy step (small = fragile).
Perplexity follows docs eval-protocol: no BOS unless tokenizer.ggml.add_bos_token,
chunks of N from an empty cache, positions j = N/2 .. N-2 predict j+1.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # see reference_forward.py
import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference_forward as ref  # noqa: E402

SHORT_PROMPT = "The capital of France is"
CHAT_PROMPT = (
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by "
    "Hugging Face<|im_end|>\n<|im_start|>user\nExplain in a few sentences why the "
    "sky is blue during the day.<|im_end|>\n<|im_start|>assistant\n"
)


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def f7(x) -> float:
    """float32 value rounded to 7 significant digits (relative error < 1e-6)."""
    return float(f"{float(x):.7g}")


def prompt_case(m: ref.Model, tok, name: str, text: str, n_greedy: int, top_k: int) -> dict:
    ids = ref.encode(tok, text)
    logits = m.forward(ids)                       # whole sequence, no cache
    positions = []
    for t in range(len(ids)):
        top = np.argsort(-logits[t], kind="stable")[:top_k]
        positions.append({"pos": t, "top_ids": [int(i) for i in top],
                          "top_logits": [f7(logits[t, i]) for i in top]})
    greedy, margins = m.generate_greedy(ids, n_greedy)   # KV cache path
    return {
        "name": name,
        "prompt": text,
        "prompt_ids": ids,
        "last_logits": [f7(v) for v in logits[-1]],
        "logits_positions": positions,
        "greedy_ids": greedy,
        "greedy_text": ref.decode(tok, greedy),
        "greedy_margins": [round(x, 5) for x in margins],
    }


def chunk_nll(m: ref.Model, chunk: list[int]) -> np.ndarray:
    """NLL of tokens j+1 given 0..j, for j = N/2 .. N-2 (one chunk, empty cache)."""
    n = len(chunk)
    j = np.arange(n // 2, n - 1)
    logp = ref.log_softmax(m.forward(chunk, rows=j))   # [len(j), vocab] float64
    return -logp[np.arange(len(j)), np.asarray(chunk)[j + 1]]


def perplexity(m: ref.Model, tok, text: str, n_ctx: int, max_chunks: int) -> dict:
    add_bos = bool(ref.field_value(m.reader, "tokenizer.ggml.add_bos_token", False))
    all_ids = ref.encode(tok, text)               # whole file tokenized once
    n_chunk = min(len(all_ids) // n_ctx, max_chunks)
    chunks = [all_ids[c * n_ctx:(c + 1) * n_ctx] for c in range(n_chunk)]
    if add_bos:
        bos = int(ref.field_value(m.reader, "tokenizer.ggml.bos_token_id"))
        chunks = [[bos] + ch[1:] for ch in chunks]
    nll_all, chunk_means, running = [], [], []
    for ch in chunks:
        nll = chunk_nll(m, ch)
        nll_all.append(nll)
        chunk_means.append(float(nll.mean()))
        running.append(float(np.exp(np.concatenate(nll_all).mean())))
    nll = np.concatenate(nll_all)
    mean = float(nll.mean())
    ppl = float(np.exp(mean))
    # llama-perplexity: sqrt((E[x^2] - E[x]^2) / (count - 1)) carried through exp.
    stderr = float(np.sqrt(nll.var() / (len(nll) - 1)) * ppl)
    return {
        "ppl_ctx": n_ctx,
        "ppl_chunks": n_chunk,
        "ppl_add_bos": add_bos,
        "ppl_text_n_tokens": len(all_ids),
        "ppl_scored_per_chunk": n_ctx - 1 - n_ctx // 2,
        "ppl_token_ids": chunks,
        "ppl_chunk_nll": chunk_means,
        "ppl_running": running,
        "ppl_mean_nll": mean,
        "ppl": ppl,
        "ppl_stderr": stderr,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=ref.DEFAULT_MODEL)
    ap.add_argument("--text", default="tests/data/ppl_text.txt")
    ap.add_argument("--out", default="build/golden/smollm2.json")
    ap.add_argument("--ctx", type=int, default=256)
    ap.add_argument("--chunks", type=int, default=4, help="use at most this many chunks")
    ap.add_argument("--n-greedy", type=int, default=40)
    args = ap.parse_args(argv)

    t0, c0 = time.time(), time.process_time()
    m = ref.Model.load(args.model)
    tok = ref.gguf_tokenizer(m.reader)
    t_load = time.time() - t0

    cases = [prompt_case(m, tok, "short", SHORT_PROMPT, args.n_greedy, 5),
             prompt_case(m, tok, "chat", CHAT_PROMPT, args.n_greedy, 5)]
    t_prompts = time.time() - t0 - t_load
    with open(args.text, "rb") as f:
        text = f.read().decode("utf-8")  # bytes as-is (no newline translation)
    ppl = perplexity(m, tok, text, args.ctx, args.chunks)
    ppl["ppl_text_file"] = args.text
    elapsed = time.time() - t0
    cpu = time.process_time() - c0

    golden = {
        "generator": "tests/reference/make_golden.py (NumPy reference, float32)",
        "command": "python " + " ".join(shlex.quote(a) for a in
                                        ["tests/reference/make_golden.py"] + sys.argv[1:]),
        "model": os.path.basename(args.model),
        "model_sha256": sha256_file(args.model),
        "model_bytes": os.path.getsize(args.model),
        "arch": m.hp.arch,
        "elapsed_s": round(elapsed, 1),
        "cpu_s": round(cpu, 1),
        **{k: v for k, v in cases[0].items() if k != "name"},
        "cases": cases,
        **ppl,
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(golden, f, separators=(",", ":"))
        f.write("\n")

    for c in cases:
        print(f"[{c['name']}] prompt_ids[:10]={c['prompt_ids'][:10]} (n={len(c['prompt_ids'])})")
        print(f"[{c['name']}] greedy_ids[:10]={c['greedy_ids'][:10]}")
        print(f"[{c['name']}] greedy_text={c['greedy_text']!r}")
        print(f"[{c['name']}] min greedy margin={min(c['greedy_margins']):.4f}")
    print(f"chunk NLL means: {[round(x, 4) for x in ppl['ppl_chunk_nll']]}")
    print(f"Final estimate: PPL over {ppl['ppl_chunks']} chunks for n_ctx={args.ctx} = "
          f"{ppl['ppl']:.4f} +/- {ppl['ppl_stderr']:.4f}")
    print(f"time: load {t_load:.1f} s, prompts {t_prompts:.1f} s, total {elapsed:.1f} s "
          f"(cpu {cpu:.1f} s, {os.environ['OPENBLAS_NUM_THREADS']} BLAS thread(s)) -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
