#!/usr/bin/env python3
"""Writes tests/data/quant_fixture.gguf: for each ggml type oscar dequantizes, a small
tensor `<type>` (2 rows x 512, fixed seed) and its dequantization by gguf-py,
`<type>.ref` (F32). The C++ test compares oscar's dequantization with the `.ref` tensors.

Types gguf-py can quantize are quantized from random normal data; for the K-quants
(which gguf-py only dequantizes) the blocks are random bytes with finite fp16 scales.

Also writes tests/data/smollm2_token_embd_rows.json: a few dequantized rows of
token_embd.weight from the default model, when that model is present.

Run: /root/.cache/oscar/venv/bin/python tests/reference/make_quant_fixture.py
"""
import json
import os
import sys
from pathlib import Path

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf.quants import quantize, dequantize

ROOT = Path(__file__).resolve().parents[2]
ROWS, COLS = 2, 512
QUANTIZABLE = [T.F32, T.F16, T.BF16, T.Q8_0, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1]
RANDOM_BLOCKS = [T.Q4_K, T.Q5_K, T.Q6_K]


def random_fp16(rng, n, scale):
    """n finite fp16 values as raw bytes, uniform in [-scale, scale]."""
    h = (rng.uniform(-scale, scale, n)).astype(np.float16)
    assert np.all(np.isfinite(h))
    return h.view(np.uint8).reshape(n, 2)


def random_k_blocks(rng, qtype, n_blocks):
    """Random K-quant blocks: random payload bytes, then valid fp16 scale fields."""
    block_elems, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
    b = rng.integers(0, 256, size=(n_blocks, block_bytes), dtype=np.uint8)
    if qtype in (T.Q4_K, T.Q5_K):      # d, dmin at bytes 0..3
        b[:, 0:2] = random_fp16(rng, n_blocks, 0.01)
        b[:, 2:4] = random_fp16(rng, n_blocks, 0.01)
    elif qtype == T.Q6_K:               # d at the last two bytes
        b[:, -2:] = random_fp16(rng, n_blocks, 0.01)
    return b


def quantized_rows(rng, qtype):
    if qtype in QUANTIZABLE:
        x = rng.standard_normal((ROWS, COLS)).astype(np.float32)
        x[0, :7] = [0.0, -0.0, 1e-5, -3.5, 65504.0 / 1000, 7.25, -1.0]  # a few exact values
        if qtype == T.F32:
            return x
        if qtype == T.F16:
            return x.astype(np.float16)
        return quantize(x, qtype)
    block_elems, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
    n_blocks = ROWS * COLS // block_elems
    return random_k_blocks(rng, qtype, n_blocks).reshape(ROWS, -1)


def write_quant_fixture(path):
    rng = np.random.default_rng(20240607)
    w = gguf.GGUFWriter(str(path), arch="oscar-test")
    for qtype in QUANTIZABLE + RANDOM_BLOCKS:
        q = quantized_rows(rng, qtype)
        ref = dequantize(q, qtype).astype(np.float32)
        assert ref.shape == (ROWS, COLS), (qtype.name, ref.shape)
        assert np.all(np.isfinite(ref)), qtype.name
        if qtype in (T.F32, T.F16):
            w.add_tensor(qtype.name, q)
        else:
            w.add_tensor(qtype.name, q, raw_dtype=qtype)
        w.add_tensor(qtype.name + ".ref", ref)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {path} ({path.stat().st_size} bytes)")


def write_model_rows(model, path):
    r = gguf.GGUFReader(model)
    t = next(t for t in r.tensors if t.name == "token_embd.weight")
    rows = [0, 1000, 49151]
    data = dequantize(t.data[rows], t.tensor_type).astype(np.float32)
    out = {
        "model": os.path.basename(model),
        "tensor": t.name,
        "type": t.tensor_type.name,
        "rows": {str(i): [float(v) for v in data[k]] for k, i in enumerate(rows)},
    }
    path.write_text(json.dumps(out, separators=(",", ":")) + "\n")
    print(f"wrote {path} ({path.stat().st_size} bytes)")


def main():
    data_dir = ROOT / "tests" / "data"
    data_dir.mkdir(parents=True, exist_ok=True)
    write_quant_fixture(data_dir / "quant_fixture.gguf")
    model = os.environ.get("OSCAR_MODEL", "/root/.cache/oscar/models/SmolLM2-135M-Instruct.Q4_1.gguf")
    if os.path.exists(model):
        write_model_rows(model, data_dir / "smollm2_token_embd_rows.json")
    else:
        print(f"{model} not found: skipping the model rows fixture", file=sys.stderr)


if __name__ == "__main__":
    main()
