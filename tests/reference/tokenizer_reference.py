#!/usr/bin/env python3
"""Independent reference for oscar's byte-level BPE tokenizer (src/oscar/text/).

How the committed fixtures were made:

    /root/.cache/oscar/venv/bin/python tests/reference/tokenizer_reference.py \
        --model /root/.cache/oscar/models/SmolLM2-135M-Instruct.Q4_1.gguf

(tokenizers 0.23.3, gguf-py from the same venv). It writes

  tests/data/tokenizer_expected_smollm2.json
      ids for every line of tests/data/tokenizer_corpus.txt (the file split on "\n",
      the "\n" itself not included) and for the whole file, encoded by a HuggingFace
      `tokenizers` Tokenizer rebuilt from the GGUF vocabulary and merges:
        * model: BPE(vocab, merges), no unk token, no byte fallback, ignore_merges=False;
        * pre-tokenizer: Sequence[Digits(individual_digits=True),
                                  ByteLevel(add_prefix_space=False, use_regex=True)],
          which is SmolLM2's own tokenizer.json design (HuggingFaceTB/SmolLM2-135M:
          no normalizer, Digits then ByteLevel; llama.cpp's "smollm" pre type uses the
          same two steps: split \\p{N}, then the GPT-2 regex);
        * "ids": the CONTROL tokens of the GGUF added as special tokens, so their
          literal text is matched first (oscar's parse_special=true);
        * "ids_plain": no added tokens, so "<|im_start|>" is ordinary text
          (oscar's parse_special=false).

  tests/data/pretokenize_expected.json
      for the pre types smollm, gpt2, qwen2 and llama-bpe, the pieces (UTF-8 strings)
      that the HF pre-tokenizer splits each corpus line and the whole file into:
      qwen2 and llama-bpe through Split(Regex(<tokenizer.json pattern>), "isolated"),
      smollm and gpt2 through the Digits/ByteLevel pre-tokenizers above.

Nothing here imports oscar; the C++ tests in tests/text/ compare against these files.
"""
import argparse
import json
import pathlib

import gguf
from tokenizers import AddedToken, Regex, Tokenizer, models, pre_tokenizers

ROOT = pathlib.Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests/data/tokenizer_corpus.txt"

GPT2_PATTERN = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
# The patterns of the Qwen2 and Llama 3 tokenizer.json files (Split, behavior Isolated).
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                 r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                  r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def read_gguf_vocab(path):
    r = gguf.GGUFReader(path)
    f = r.fields

    def strings(key):
        field = f[key]
        return [field.contents(i) for i in range(len(field.data))]

    tokens = strings("tokenizer.ggml.tokens")
    types = list(f["tokenizer.ggml.token_type"].contents())
    merges = strings("tokenizer.ggml.merges")
    pre = f["tokenizer.ggml.pre"].contents()
    return tokens, types, merges, pre


def build_bpe(tokens, merges, with_specials, types):
    vocab = {t: i for i, t in enumerate(tokens)}
    pairs = [tuple(m.split(" ", 1)) for m in merges]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=pairs, unk_token=None, fuse_unk=False,
                               byte_fallback=False, ignore_merges=False))
    tok.pre_tokenizer = smollm_pre_tokenizer()
    if with_specials:
        control = [tokens[i] for i, t in enumerate(types) if t == 3]
        tok.add_special_tokens([AddedToken(c, special=True, normalized=False, lstrip=False,
                                           rstrip=False, single_word=False) for c in control])
        for c in control:
            assert tok.token_to_id(c) == vocab[c], c
    return tok


def smollm_pre_tokenizer():
    return pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])


def pre_tokenizer_for(pre):
    if pre == "smollm":
        return smollm_pre_tokenizer()
    if pre == "gpt2":
        return pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if pre == "qwen2":
        return pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated")
    if pre == "llama-bpe":
        return pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated")
    raise ValueError(pre)


def split_pieces(pt, text):
    # Offsets index the original string (in characters), so the pieces come back as
    # raw text even where the pre-tokenizer byte-maps them (ByteLevel).
    pieces = [text[a:b] for _, (a, b) in pt.pre_tokenize_str(text)]
    assert "".join(pieces) == text, (text, pieces)
    return pieces


def dump_compact(obj, depth=0):
    """JSON with one list item per line (diff-friendly), innermost lists on one line."""
    pad = " " * (depth + 1)
    if isinstance(obj, dict):
        items = [f"{pad}{json.dumps(k)}: {dump_compact(v, depth + 1).strip()}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + " " * depth + "}" + ("\n" if depth == 0 else "")
    if isinstance(obj, list) and any(isinstance(x, (list, dict)) for x in obj):
        items = [pad + dump_compact(x, depth + 1).strip() for x in obj]
        return "[\n" + ",\n".join(items) + "\n" + " " * depth + "]"
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def corpus_lines(text):
    return text.split("\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="/root/.cache/oscar/models/SmolLM2-135M-Instruct.Q4_1.gguf")
    args = ap.parse_args()

    text = CORPUS.read_bytes().decode("utf-8")
    lines = corpus_lines(text)

    tokens, types, merges, pre = read_gguf_vocab(args.model)
    assert pre == "smollm", pre
    special = build_bpe(tokens, merges, True, types)
    plain = build_bpe(tokens, merges, False, types)

    def enc(tok, s):
        return tok.encode(s, add_special_tokens=False).ids

    # Spot checks against ids published for the real SmolLM2 tokenizer.
    assert enc(plain, "Hello world! 123") == [19556, 905, 17, 216, 33, 34, 35]
    assert enc(plain, "  multiple   spaces") == [216, 2701, 256, 5600]

    fixture = {
        "model": pathlib.Path(args.model).name,
        "pre": pre,
        "n_vocab": len(tokens),
        "lines": [{"text": s, "ids": enc(special, s), "ids_plain": enc(plain, s)} for s in lines],
        "whole_file": {"ids": enc(special, text), "ids_plain": enc(plain, text)},
    }
    out = ROOT / "tests/data/tokenizer_expected_smollm2.json"
    out.write_text(dump_compact(fixture), encoding="utf-8")

    pre_fixture = {}
    for p in ["smollm", "gpt2", "qwen2", "llama-bpe"]:
        pt = pre_tokenizer_for(p)
        pre_fixture[p] = {
            "lines": [split_pieces(pt, s) for s in lines],
            "whole_file": split_pieces(pt, text),
        }
    out2 = ROOT / "tests/data/pretokenize_expected.json"
    out2.write_text(dump_compact(pre_fixture), encoding="utf-8")
    print(f"wrote {out} and {out2}: {len(lines)} lines, {len(fixture['whole_file']['ids'])} ids")


if __name__ == "__main__":
    main()
