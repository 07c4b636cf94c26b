#!/usr/bin/env python3
"""Reference numbers for the large-model test tier (tests/large/run_large.sh).

Loads a GGUF model once with the independent NumPy reference
(tests/reference/reference_forward.py) and writes one JSON object with
  - per prompt: prompt_ids, greedy_ids (n tokens, EOS not special), greedy_margins,
    and the text `oscar run --temp 0 --no-display-prompt` should print: the
    decoded greedy tokens up to (not including) the first end-of-generation token;
  - perplexity per docs eval-protocol (make_golden.perplexity): ppl, chunk NLLs.

    python tests/large/qwen_reference.py --model M.gguf --prompt "def fibonacci(n):" \
        --prompt "The capital of France is" -n 32 --text tests/data/ppl_text.txt \
        --ctx 256 --chunks 2 --out build/large/qwen_ref.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "reference"))
import reference_forward as ref  # noqa: E402
import make_golden  # noqa: E402

# Control-token texts that end generation (the engine stops before printing them).
EOG_TEXTS = {"<|endoftext|>", "<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|end_of_text|>",
             "<end_of_turn>", "<|end|>", "<|return|>", "<EOT>", "<|end\u2581of\u2581sentence|>"}


def eog_ids(reader) -> set[int]:
    tokens = ref.field_value(reader, "tokenizer.ggml.tokens")
    types = ref.field_value(reader, "tokenizer.ggml.token_type")
    ids = {i for i, (t, ty) in enumerate(zip(tokens, types)) if ty in (3, 4) and t in EOG_TEXTS}
    for key in ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id"):
        v = ref.field_value(reader, key)
        if v is not None:
            ids.add(int(v))
    return ids


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompt", action="append", default=[], help="repeatable")
    ap.add_argument("-n", "--n-greedy", type=int, default=32)
    ap.add_argument("--text", help="perplexity text file (omit to skip perplexity)")
    ap.add_argument("--ctx", type=int, default=256)
    ap.add_argument("--chunks", type=int, default=2)
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)

    t0 = time.time()
    m = ref.Model.load(args.model)
    tok = ref.gguf_tokenizer(m.reader)
    eog = eog_ids(m.reader)
    t_load = time.time() - t0
    print(f"[ref] loaded {os.path.basename(args.model)} ({m.hp.arch}) in {t_load:.1f} s", file=sys.stderr)

    out = {"model": os.path.basename(args.model), "arch": m.hp.arch, "n_greedy": args.n_greedy,
           "eog_ids": sorted(eog), "cases": []}
    for p in args.prompt:
        t1 = time.time()
        ids = ref.encode(tok, p)
        gen, margins = m.generate_greedy(ids, args.n_greedy)
        stop = next((i for i, t in enumerate(gen) if t in eog), len(gen))
        out["cases"].append({
            "prompt": p, "prompt_ids": ids, "greedy_ids": gen,
            "greedy_margins": [round(x, 5) for x in margins],
            "n_until_eog": stop, "text_until_eog": ref.decode(tok, gen[:stop]),
        })
        print(f"[ref] greedy {len(gen)} tokens for {p!r} in {time.time() - t1:.1f} s: "
              f"{ref.decode(tok, gen[:stop])!r}", file=sys.stderr)
    if args.text:
        t1 = time.time()
        with open(args.text, "rb") as f:
            text = f.read().decode("utf-8")
        ppl = make_golden.perplexity(m, tok, text, args.ctx, args.chunks)
        ppl.pop("ppl_token_ids")
        ppl["ppl_text_file"] = args.text
        out.update(ppl)
        print(f"[ref] PPL over {ppl['ppl_chunks']} chunks for n_ctx={args.ctx} = {ppl['ppl']:.4f} "
              f"+/- {ppl['ppl_stderr']:.4f} ({time.time() - t1:.1f} s)", file=sys.stderr)
    out["elapsed_s"] = round(time.time() - t0, 1)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
