#!/usr/bin/env python3
"""Independent NumPy reference forward pass for GGUF decoder-only models.

Written from the model definitions (Llama, Qwen2, Qwen3), not from oscar's C++
code, so that the C++ engine can be checked against it.  Supported:

  llama  RMSNorm, GQA attention, RoPE in "normal" mode (pairs (2i, 2i+1)),
         SwiGLU MLP.  llama.cpp's HF->GGUF converter permutes the rows of
         attn_q / attn_k so that the HF "rotate_half" layout becomes adjacent
         pairs; that is why GGUF llama rotates (2i, 2i+1).
  qwen2  like llama plus biases on q, k, v; RoPE in NeoX mode (pairs (i, i+d/2)).
  qwen3  like llama (no biases) plus a per-head RMSNorm on q and k before RoPE;
         RoPE in NeoX mode.

Every weight is dequantized to float32 once (gguf.quants.dequantize) and kept in
memory.  Matmuls run in float32 (or float64 with --dtype float64); RMSNorm and
softmax reductions run in float64.

Library use:
    m = Model.load(path)                 # ~3 s for SmolLM2-135M
    logits = m.forward(ids)              # [T, vocab] float32, whole sequence
    cache = m.new_cache(); m.forward(ids[:5], cache); m.forward(ids[5:], cache)
    ids_out, margins = m.generate_greedy(prompt_ids, 40)
    tok = gguf_tokenizer(m.reader)       # tokenizers.Tokenizer from the GGUF vocab

CLI:
    reference_forward.py --model M.gguf --prompt "The capital of France is" -n 20
    reference_forward.py --model M.gguf --ids 504,3575,282 --top 5
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass

# One BLAS thread unless told otherwise: on a small, busy CI machine OpenBLAS
# threads that spin-wait for a core are several times slower than one thread.
# Set OPENBLAS_NUM_THREADS=2 to use both cores of an idle machine.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import gguf  # noqa: E402

DEFAULT_MODEL = "/root/.cache/oscar/models/SmolLM2-135M-Instruct.Q4_1.gguf"

# RoPE pairing per architecture: "normal" = (2i, 2i+1), "neox" = (i, i + n_rot/2).
ROPE_MODE = {"llama": "normal", "qwen2": "neox", "qwen3": "neox"}


# --------------------------------------------------------------------------
# GGUF metadata helpers
# --------------------------------------------------------------------------

def field_value(reader: gguf.GGUFReader, key: str, default=None):
    """Return the Python value of a GGUF metadata field, or `default`."""
    f = reader.fields.get(key)
    if f is None:
        return default
    return f.contents()


@dataclass
class HParams:
    arch: str
    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_ff: int
    n_vocab: int
    eps: float
    rope_base: float
    n_rot: int
    rope_mode: str

    @staticmethod
    def from_reader(r: gguf.GGUFReader, n_vocab: int) -> "HParams":
        arch = field_value(r, "general.architecture")
        if arch not in ROPE_MODE:
            raise NotImplementedError(f"architecture {arch!r} not supported")

        def get(name, default=None):
            v = field_value(r, f"{arch}.{name}", default)
            if v is None:
                raise KeyError(f"missing GGUF field {arch}.{name}")
            return v

        n_embd = int(get("embedding_length"))
        n_head = int(get("attention.head_count"))
        n_head_kv = int(get("attention.head_count_kv", n_head))
        # Qwen3 (and others) may set head_dim != n_embd / n_head.
        head_dim = int(get("attention.key_length", n_embd // n_head))
        value_dim = int(get("attention.value_length", head_dim))
        if value_dim != head_dim:
            raise NotImplementedError("key_length != value_length")
        scaling = field_value(r, f"{arch}.rope.scaling.type", "none")
        if scaling not in ("none", None):
            raise NotImplementedError(f"rope scaling {scaling!r} not supported")
        return HParams(
            arch=arch,
            n_layer=int(get("block_count")),
            n_embd=n_embd,
            n_head=n_head,
            n_head_kv=n_head_kv,
            head_dim=head_dim,
            n_ff=int(get("feed_forward_length")),
            n_vocab=n_vocab,
            eps=float(get("attention.layer_norm_rms_epsilon")),
            rope_base=float(get("rope.freq_base", 10000.0)),
            n_rot=int(get("rope.dimension_count", head_dim)),
            rope_mode=ROPE_MODE[arch],
        )


# --------------------------------------------------------------------------
# Building blocks
# --------------------------------------------------------------------------

def rms_norm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    """x / sqrt(mean(x^2) + eps) * w over the last axis; reduction in float64."""
    x64 = x.astype(np.float64)
    inv = 1.0 / np.sqrt(np.mean(x64 * x64, axis=-1, keepdims=True) + eps)
    return (x64 * inv).astype(x.dtype) * w


def silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


def rope_angles(positions: np.ndarray, n_rot: int, base: float,
                freq_factors: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """cos/sin of shape [T, n_rot/2]: angle(p, i) = p * base^(-2i/n_rot)."""
    i = np.arange(n_rot // 2, dtype=np.float64)
    inv_freq = base ** (-2.0 * i / n_rot)
    if freq_factors is not None:          # llama3-style rope_freqs.weight
        inv_freq = inv_freq / freq_factors.astype(np.float64)
    ang = positions.astype(np.float64)[:, None] * inv_freq[None, :]
    return np.cos(ang), np.sin(ang)


def apply_rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, n_rot: int,
               mode: str) -> np.ndarray:
    """Rotate the first n_rot dims of x [T, heads, head_dim].

    normal: pair i is (x[2i], x[2i+1]);  neox: pair i is (x[i], x[i + n_rot/2]).
    Each pair (a, b) becomes (a cos - b sin, a sin + b cos).
    """
    out = x.copy()
    c = cos[:, None, :].astype(x.dtype)   # [T, 1, n_rot/2]
    s = sin[:, None, :].astype(x.dtype)
    half = n_rot // 2
    if mode == "normal":
        a, b = x[..., 0:n_rot:2], x[..., 1:n_rot:2]
        out[..., 0:n_rot:2] = a * c - b * s
        out[..., 1:n_rot:2] = a * s + b * c
    elif mode == "neox":
        a, b = x[..., :half], x[..., half:n_rot]
        out[..., :half] = a * c - b * s
        out[..., half:n_rot] = a * s + b * c
    else:
        raise ValueError(mode)
    return out


def log_softmax(logits: np.ndarray) -> np.ndarray:
    z = logits.astype(np.float64)
    z = z - z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


# --------------------------------------------------------------------------
# Model
# --------------------------------------------------------------------------

class KVCache:
    """Per-layer K and V after RoPE: lists of arrays [S, n_head_kv, head_dim]."""

    def __init__(self, n_layer: int):
        self.k = [None] * n_layer
        self.v = [None] * n_layer
        self.n_past = 0


class Model:
    def __init__(self, reader: gguf.GGUFReader, weights: dict[str, np.ndarray],
                 dtype=np.float32, rope_mode: str | None = None):
        self.reader = reader
        self.dtype = np.dtype(dtype)
        self.w = {k: v.astype(self.dtype, copy=False) for k, v in weights.items()}
        self.hp = HParams.from_reader(reader, self.w["token_embd.weight"].shape[0])
        if rope_mode is not None:            # only for experiments (layout check)
            self.hp.rope_mode = rope_mode
        # Tied embeddings: the output matrix is token_embd when output.weight is absent.
        self.w_out = self.w.get("output.weight", self.w["token_embd.weight"])
        self.rope_freqs = weights.get("rope_freqs.weight")
        hp = self.hp
        assert hp.n_head % hp.n_head_kv == 0
        assert self.w["blk.0.attn_q.weight"].shape == (hp.n_head * hp.head_dim, hp.n_embd)
        assert self.w["blk.0.attn_k.weight"].shape == (hp.n_head_kv * hp.head_dim, hp.n_embd)

    @staticmethod
    def load_weights(path: str) -> tuple[gguf.GGUFReader, dict[str, np.ndarray]]:
        """Dequantize every tensor to float32, shaped [rows, cols] = [out, in]."""
        r = gguf.GGUFReader(path)
        weights = {}
        for t in r.tensors:
            a = gguf.quants.dequantize(t.data, t.tensor_type)
            # GGUF lists dims fastest-first; numpy wants them slowest-first.
            shape = tuple(int(d) for d in reversed(t.shape))
            weights[t.name] = np.ascontiguousarray(a.reshape(shape), dtype=np.float32)
        return r, weights

    @classmethod
    def load(cls, path: str, dtype=np.float32, rope_mode: str | None = None) -> "Model":
        r, w = cls.load_weights(path)
        return cls(r, w, dtype=dtype, rope_mode=rope_mode)

    def new_cache(self) -> KVCache:
        return KVCache(self.hp.n_layer)

    # -- one transformer block ------------------------------------------------
    def _attention(self, il: int, h: np.ndarray, cos, sin, cache: KVCache | None,
                   n_past: int) -> np.ndarray:
        hp, w = self.hp, self.w
        p = f"blk.{il}."
        T = h.shape[0]
        q = h @ w[p + "attn_q.weight"].T
        k = h @ w[p + "attn_k.weight"].T
        v = h @ w[p + "attn_v.weight"].T
        if p + "attn_q.bias" in w:          # qwen2
            q = q + w[p + "attn_q.bias"]
            k = k + w[p + "attn_k.bias"]
            v = v + w[p + "attn_v.bias"]
        q = q.reshape(T, hp.n_head, hp.head_dim)
        k = k.reshape(T, hp.n_head_kv, hp.head_dim)
        v = v.reshape(T, hp.n_head_kv, hp.head_dim)
        if p + "attn_q_norm.weight" in w:   # qwen3: per-head RMSNorm before RoPE
            q = rms_norm(q, w[p + "attn_q_norm.weight"], hp.eps)
            k = rms_norm(k, w[p + "attn_k_norm.weight"], hp.eps)
        q = apply_rope(q, cos, sin, hp.n_rot, hp.rope_mode)
        k = apply_rope(k, cos, sin, hp.n_rot, hp.rope_mode)

        if cache is not None:
            if cache.k[il] is not None:
                k = np.concatenate([cache.k[il], k], axis=0)
                v = np.concatenate([cache.v[il], v], axis=0)
            cache.k[il], cache.v[il] = k, v
        S = k.shape[0]                       # number of keys = n_past + T

        # GQA: query head hq reads KV head hq // (n_head / n_head_kv).
        kv_of_head = np.arange(hp.n_head) // (hp.n_head // hp.n_head_kv)
        qh = q.transpose(1, 0, 2)                    # [H, T, D]
        kh = k[:, kv_of_head, :].transpose(1, 0, 2)  # [H, S, D]
        vh = v[:, kv_of_head, :].transpose(1, 0, 2)  # [H, S, D]
        scores = (qh @ kh.transpose(0, 2, 1)).astype(np.float64) / np.sqrt(hp.head_dim)
        # Causal mask: query at absolute position n_past + t sees keys 0 .. n_past + t.
        q_pos = n_past + np.arange(T)[:, None]
        k_pos = np.arange(S)[None, :]
        scores = np.where(k_pos <= q_pos, scores, -np.inf)
        scores -= scores.max(axis=-1, keepdims=True)
        probs = np.exp(scores)
        probs /= probs.sum(axis=-1, keepdims=True)
        out = probs.astype(self.dtype) @ vh          # [H, T, D]
        out = out.transpose(1, 0, 2).reshape(T, hp.n_head * hp.head_dim)
        return out @ w[p + "attn_output.weight"].T

    def _mlp(self, il: int, h: np.ndarray) -> np.ndarray:
        w = self.w
        p = f"blk.{il}."
        gate = h @ w[p + "ffn_gate.weight"].T
        up = h @ w[p + "ffn_up.weight"].T
        return (silu(gate) * up) @ w[p + "ffn_down.weight"].T

    # -- full model -------------------------------------------------------------
    def forward(self, ids, cache: KVCache | None = None, rows=None) -> np.ndarray:
        """Logits [T, vocab] for token ids `ids`.

        Without a cache this is the plain whole-sequence forward (positions 0..T-1).
        With a cache the tokens continue the cached sequence (positions n_past..).
        `rows` (optional index array) limits the output projection to those
        positions, to save time when only some logits are needed.
        """
        hp, w = self.hp, self.w
        ids = np.asarray(ids, dtype=np.int64)
        n_past = cache.n_past if cache is not None else 0
        positions = n_past + np.arange(len(ids))
        cos, sin = rope_angles(positions, hp.n_rot, hp.rope_base, self.rope_freqs)

        x = w["token_embd.weight"][ids]              # [T, n_embd]
        for il in range(hp.n_layer):
            p = f"blk.{il}."
            x = x + self._attention(il, rms_norm(x, w[p + "attn_norm.weight"], hp.eps),
                                    cos, sin, cache, n_past)
            x = x + self._mlp(il, rms_norm(x, w[p + "ffn_norm.weight"], hp.eps))
        if rows is not None:
            x = x[rows]
        x = rms_norm(x, w["output_norm.weight"], hp.eps)
        if cache is not None:
            cache.n_past += len(ids)
        return (x @ self.w_out.T).astype(np.float32)

    def generate_greedy(self, prompt_ids, n_new: int) -> tuple[list[int], list[float]]:
        """n_new greedy tokens (argmax, lowest id on ties) with a KV cache; EOS is
        not treated specially.  Also returns top1 - top2 logit margin per step."""
        cache = self.new_cache()
        logits = self.forward(prompt_ids, cache)[-1]
        out, margins = [], []
        for _ in range(n_new):
            nxt = int(np.argmax(logits))
            top2 = np.partition(logits, -2)[-2:]
            out.append(nxt)
            margins.append(float(top2[1] - top2[0]))
            logits = self.forward([nxt], cache)[-1]
        return out, margins


# --------------------------------------------------------------------------
# Tokenizer from the GGUF vocabulary (HF `tokenizers`)
# --------------------------------------------------------------------------

# Qwen2's pre-tokenizer split pattern (from its tokenizer.json).
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
               r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def gguf_tokenizer(reader: gguf.GGUFReader):
    """Byte-level BPE tokenizer built from tokenizer.ggml.{tokens,merges}.

    smollm: Sequence[Digits(individual_digits=True), ByteLevel(add_prefix_space=False,
            use_regex=True)]  (GPT-2 regex after splitting every digit).
    qwen2:  Sequence[Split(QWEN2_SPLIT, isolated), ByteLevel(use_regex=False)].
    Control tokens (token_type 3) become special added tokens, so "<|im_start|>"
    in the text maps to its single id.  No BOS is added here.
    """
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

    model = field_value(reader, "tokenizer.ggml.model")
    pre = field_value(reader, "tokenizer.ggml.pre")
    if model != "gpt2":
        raise NotImplementedError(f"tokenizer model {model!r}")
    tokens = field_value(reader, "tokenizer.ggml.tokens")
    types = field_value(reader, "tokenizer.ggml.token_type")
    merges = [tuple(m.split(" ", 1)) for m in field_value(reader, "tokenizer.ggml.merges")]
    vocab = {t: i for i, t in enumerate(tokens)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    if pre in ("smollm", "starcoder"):
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ])
    elif pre in ("qwen2",):
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
    else:
        raise NotImplementedError(f"pre-tokenizer {pre!r}")
    tok.decoder = decoders.ByteLevel()
    specials = [tokens[i] for i, t in enumerate(types) if t == 3]
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
    return tok


def encode(tok, text: str) -> list[int]:
    return tok.encode(text, add_special_tokens=False).ids


def decode(tok, ids) -> str:
    return tok.decode(list(ids), skip_special_tokens=False)


# --------------------------------------------------------------------------
# Self-check: the reference against itself, computed two ways
# --------------------------------------------------------------------------

def rel_err(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """(max |a-b| / max |b|, ||a-b|| / ||b||) over the whole array."""
    a, b = a.astype(np.float64), b.astype(np.float64)
    return (float(np.abs(a - b).max() / np.abs(b).max()),
            float(np.linalg.norm(a - b) / np.linalg.norm(b)))


def self_check(model_path: str, text_path: str) -> bool:
    r, weights = Model.load_weights(model_path)
    m = Model(r, weights)
    tok = gguf_tokenizer(r)
    ok = True

    def report(name, good, detail):
        nonlocal ok
        ok &= bool(good)
        print(f"[{'ok' if good else 'FAIL'}] {name}: {detail}")

    text = open(text_path, "rb").read().decode("utf-8")
    chat = ("<|im_start|>user\nWhat is 12 + 30?<|im_end|>\n<|im_start|>assistant\n")
    for sample in (text, chat):
        back = decode(tok, encode(tok, sample))
        report("tokenizer round trip", back == sample, f"{len(encode(tok, sample))} tokens")
    report("special tokens are single ids", encode(tok, chat)[0] == 1,
           f"{encode(tok, chat)[:6]}")
    report("digits split one by one", len(encode(tok, " 2024")) == 5, encode(tok, " 2024"))

    prompt = encode(tok, "The capital of France is")
    gen, _ = m.generate_greedy(prompt, 24)                # KV-cache path
    ids = prompt + gen
    whole = m.forward(ids)                                # whole sequence
    report("greedy (cached) == argmax of whole-sequence logits",
           [int(i) for i in whole[len(prompt) - 1:-1].argmax(-1)] == gen, decode(tok, gen))

    cache = m.new_cache()
    parts = [m.forward(ids[:3], cache)]
    parts += [m.forward([t], cache) for t in ids[3:9]]
    parts.append(m.forward(ids[9:], cache))
    e = rel_err(np.concatenate(parts), whole)
    report("incremental (3 + 1x6 + rest) vs whole-sequence logits", e[0] < 1e-4,
           f"max-rel {e[0]:.2e}, l2-rel {e[1]:.2e}")

    m64 = Model(r, weights, dtype=np.float64)
    e = rel_err(whole, m64.forward(ids))
    report("float32 vs float64 logits", e[0] < 1e-4, f"max-rel {e[0]:.2e}, l2-rel {e[1]:.2e}")
    del m64

    chunk = encode(tok, text)[:256]
    j = np.arange(128, 255)
    ppl = {}
    for mode in ("normal", "neox"):
        mm = Model(r, weights, rope_mode=mode)
        logp = log_softmax(mm.forward(chunk, rows=j))
        ppl[mode] = float(np.exp(-logp[np.arange(len(j)), np.asarray(chunk)[j + 1]].mean()))
    want = ROPE_MODE[m.hp.arch]
    other = "neox" if want == "normal" else "normal"
    report(f"RoPE layout: {want} beats {other} (first 256-token chunk)",
           ppl[want] * 2 < ppl[other], f"ppl {want} {ppl[want]:.2f} vs {other} {ppl[other]:.2f}")
    return ok


# --------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=DEFAULT_MODEL)
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--self-check", metavar="TEXT",
                   help="run consistency checks using this text file, then exit")
    g.add_argument("--ids", help="comma-separated token ids")
    g.add_argument("--prompt", help="text, tokenized with the GGUF vocabulary (no BOS)")
    ap.add_argument("-n", "--n-predict", type=int, default=0, help="greedy tokens to generate")
    ap.add_argument("--top", type=int, default=5, help="print top-k logits of the last position")
    ap.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)

    if args.self_check:
        return 0 if self_check(args.model, args.self_check) else 1

    t0 = time.time()
    m = Model.load(args.model, dtype=args.dtype)
    tok = gguf_tokenizer(m.reader)
    ids = [int(s) for s in args.ids.split(",")] if args.ids else encode(tok, args.prompt)
    logits = m.forward(ids)
    last = logits[-1]
    top = np.argsort(-last, kind="stable")[: args.top]
    result = {
        "ids": ids,
        "top_ids": [int(i) for i in top],
        "top_logits": [float(last[i]) for i in top],
        "top_tokens": [decode(tok, [int(i)]) for i in top],
    }
    if args.n_predict > 0:
        gen, _ = m.generate_greedy(ids, args.n_predict)
        result["greedy_ids"] = gen
        result["greedy_text"] = decode(tok, gen)
    if args.json:
        print(json.dumps(result))
    else:
        for k, v in result.items():
            print(f"{k}: {v!r}")
        print(f"[{time.time() - t0:.1f} s]", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
