#!/usr/bin/env python3
"""Writes tests/data/tiny_llama_st/: a tiny random Llama-shaped Hugging Face checkpoint
(config.json + model.safetensors mixing F32, F16 and BF16) and expected.json with every
tensor's GGUF name, shape and values as f32, for tests/model/test_safetensors_source.cpp
and tests/formats/test_safetensors.cpp.

The file is written by the `safetensors` package (an independent writer), not by oscar.
Run with the project venv: $OSCAR_VENV/bin/python tests/reference/make_safetensors_fixture.py
"""
import json
import pathlib

import numpy as np
from safetensors import TensorSpec, serialize_file

OUT = pathlib.Path(__file__).resolve().parent.parent / "data" / "tiny_llama_st"

CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 8,
    "intermediate_size": 16,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": None,  # HF writes null: defaults to hidden_size / heads
    "vocab_size": 16,
    "max_position_embeddings": 128,
    "rms_norm_eps": 1e-05,
    "rope_theta": 500000.0,
    "rope_scaling": {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 64,
    },
    "tie_word_embeddings": False,
    "attention_bias": False,
    "torch_dtype": "bfloat16",
}

# Values whose conversion is easy to get wrong: signed zero, subnormals, the f16 maximum.
F16_SPECIALS = np.array([1.0, -0.0, 6e-08, 65504.0, -2.5, 0.333, 1e-05, 3.0], np.float32)
BF16_SPECIALS = np.array([1.0, -0.0, 1e-40, 3.0e38, -2.5, 0.333, -1e-3, 7.0], np.float32)


def to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bit patterns, rounding to nearest even (finite inputs)."""
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype(np.uint16)


def bf16_bits_to_f32(b: np.ndarray) -> np.ndarray:
    return (b.astype(np.uint32) << 16).view(np.float32)


def tensor_list(rng):
    h, ff, v = CONFIG["hidden_size"], CONFIG["intermediate_size"], CONFIG["vocab_size"]
    kv = CONFIG["num_key_value_heads"] * h // CONFIG["num_attention_heads"]
    yield "model.embed_tokens.weight", "token_embd.weight", (v, h), "F32"
    for i in range(CONFIG["num_hidden_layers"]):
        p, g = f"model.layers.{i}.", f"blk.{i}."
        yield p + "input_layernorm.weight", g + "attn_norm.weight", (h,), "BF16" if i == 1 else "F32"
        yield p + "self_attn.q_proj.weight", g + "attn_q.weight", (h, h), "F32"
        yield p + "self_attn.k_proj.weight", g + "attn_k.weight", (kv, h), "F16"
        yield p + "self_attn.v_proj.weight", g + "attn_v.weight", (kv, h), "BF16"
        yield p + "self_attn.o_proj.weight", g + "attn_output.weight", (h, h), "F16"
        yield p + "post_attention_layernorm.weight", g + "ffn_norm.weight", (h,), "F32"
        yield p + "mlp.gate_proj.weight", g + "ffn_gate.weight", (ff, h), "BF16"
        yield p + "mlp.up_proj.weight", g + "ffn_up.weight", (ff, h), "F16"
        yield p + "mlp.down_proj.weight", g + "ffn_down.weight", (h, ff), "F32"
    # Old Llama checkpoints carry this buffer; the engine computes it and ignores the tensor.
    yield "model.layers.0.self_attn.rotary_emb.inv_freq", None, (2,), "F32"
    yield "model.norm.weight", "output_norm.weight", (h,), "F16"
    yield "lm_head.weight", "output.weight", (v, h), "BF16"


def main():
    rng = np.random.default_rng(20240607)
    OUT.mkdir(parents=True, exist_ok=True)
    specs, keep, expected = {}, [], {}
    for hf, gguf, shape, dtype in tensor_list(rng):
        x = rng.standard_normal(shape).astype(np.float32)
        if hf == "model.norm.weight":
            x = F16_SPECIALS.copy()
        if hf == "model.layers.1.input_layernorm.weight":
            x = BF16_SPECIALS.copy()
        if dtype == "F32":
            stored, as_f32, name = x, x, "float32"
        elif dtype == "F16":
            stored = x.astype(np.float16)
            as_f32, name = stored.astype(np.float32), "float16"
        else:
            stored = to_bf16_bits(x)
            as_f32, name = bf16_bits_to_f32(stored), "bfloat16"
        stored = np.ascontiguousarray(stored)
        keep.append(stored)
        specs[hf] = TensorSpec(dtype=name, shape=shape, data_ptr=stored.ctypes.data, data_len=stored.nbytes)
        expected[hf] = {
            "gguf": gguf,
            "dtype": dtype,
            "shape": list(shape),
            "values": [float(f) for f in as_f32.reshape(-1)],
        }
    serialize_file(specs, str(OUT / "model.safetensors"), metadata={"format": "pt", "note": "oscar test fixture"})
    (OUT / "config.json").write_text(json.dumps(CONFIG, indent=2) + "\n")
    (OUT / "expected.json").write_text(json.dumps({"metadata": {"format": "pt", "note": "oscar test fixture"},
                                                   "tensors": expected}) + "\n")
    (OUT / "model.safetensors").chmod(0o644)  # the writer creates it owner-only
    print(f"wrote {OUT} ({(OUT / 'model.safetensors').stat().st_size} bytes of weights)")


if __name__ == "__main__":
    main()
