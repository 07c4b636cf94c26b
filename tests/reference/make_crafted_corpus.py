#!/usr/bin/env python3
"""Writes tests/data/crafted/: model and rotation files each broken in one known way (the
classes of llama.cpp's GGUF loader bugs and of hostile zip/pickle files), for
tests/cli/crafted_test.sh, which expects each to give a clean `error:` naming the file and
the field, exit 1, within seconds and in bounded memory. Standard library only.

  python3 tests/reference/make_crafted_corpus.py [OUT_DIR]
"""
import io
import json
import os
import shutil
import struct
import sys
import zipfile

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "data", "crafted")
HERE = os.path.dirname(os.path.abspath(__file__))
cases = {}  # name -> {"cmd": how to open it, "expect": substring of the error}

# ---- GGUF ------------------------------------------------------------------------------
U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
GGML_F32 = 0


def gstr(x):
    b = x.encode() if isinstance(x, str) else x
    return struct.pack("<Q", len(b)) + b


def kv(key, vtype, payload):
    return gstr(key) + struct.pack("<I", vtype) + payload


def kv_u32(key, v):
    return kv(key, U32, struct.pack("<I", v))


def kv_i32(key, v):
    return kv(key, I32, struct.pack("<i", v))


def kv_f32(key, v):
    return kv(key, F32, struct.pack("<f", v))


def kv_str(key, v):
    return kv(key, STR, gstr(v))


def kv_str_arr(key, items):
    return kv(key, ARR, struct.pack("<IQ", STR, len(items)) + b"".join(gstr(i) for i in items))


def kv_i32_arr(key, items):
    return kv(key, ARR, struct.pack("<IQ", I32, len(items)) + b"".join(struct.pack("<i", i) for i in items))


def tinfo(name, dims, ttype=GGML_F32, offset=0):
    return gstr(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims) + struct.pack(
        "<IQ", ttype, offset)


E, HEADS, KV_HEADS, FF, LAYERS = 16, 2, 2, 32, 1
# The byte-level vocabulary: the 256 byte symbols of GPT-2's mapping, then two specials.
def byte_symbols():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for _, c in sorted(zip(bs, cs))]


VOCAB = byte_symbols() + ["<|endoftext|>", "<|im_start|>"]


def model_meta(over=None, drop=()):
    m = {
        "general.architecture": kv_str("general.architecture", "llama"),
        "llama.context_length": kv_u32("llama.context_length", 256),
        "llama.embedding_length": kv_u32("llama.embedding_length", E),
        "llama.block_count": kv_u32("llama.block_count", LAYERS),
        "llama.feed_forward_length": kv_u32("llama.feed_forward_length", FF),
        "llama.attention.head_count": kv_u32("llama.attention.head_count", HEADS),
        "llama.attention.head_count_kv": kv_u32("llama.attention.head_count_kv", KV_HEADS),
        "llama.attention.layer_norm_rms_epsilon": kv_f32("llama.attention.layer_norm_rms_epsilon", 1e-5),
        "llama.rope.freq_base": kv_f32("llama.rope.freq_base", 10000.0),
        "tokenizer.ggml.model": kv_str("tokenizer.ggml.model", "gpt2"),
        "tokenizer.ggml.pre": kv_str("tokenizer.ggml.pre", "gpt2"),
        "tokenizer.ggml.tokens": kv_str_arr("tokenizer.ggml.tokens", VOCAB),
        "tokenizer.ggml.token_type": kv_i32_arr("tokenizer.ggml.token_type", [1] * 256 + [3, 3]),
        "tokenizer.ggml.merges": kv_str_arr("tokenizer.ggml.merges", []),
        "tokenizer.ggml.bos_token_id": kv_u32("tokenizer.ggml.bos_token_id", 256),
        "tokenizer.ggml.eos_token_id": kv_u32("tokenizer.ggml.eos_token_id", 256),
    }
    for k in drop:
        del m[k]
    m.update(over or {})
    return list(m.values())


def model_tensors():
    V = len(VOCAB)
    t = [("token_embd.weight", [E, V]), ("output_norm.weight", [E]), ("output.weight", [E, V])]
    for l in range(LAYERS):
        t += [(f"blk.{l}.attn_norm.weight", [E]), (f"blk.{l}.attn_q.weight", [E, E]),
              (f"blk.{l}.attn_k.weight", [E, E]), (f"blk.{l}.attn_v.weight", [E, E]),
              (f"blk.{l}.attn_output.weight", [E, E]), (f"blk.{l}.ffn_norm.weight", [E]),
              (f"blk.{l}.ffn_gate.weight", [E, FF]), (f"blk.{l}.ffn_up.weight", [E, FF]),
              (f"blk.{l}.ffn_down.weight", [FF, E])]
    return t


def gguf(meta, tensors, version=3, alignment=32, infos=None, data=None, n_tensors=None, n_kv=None):
    """tensors: [(name, dims)] laid out one after another (f32 zeros); infos/data override."""
    if infos is None:
        infos, off = [], 0
        for name, dims in tensors:
            infos.append(tinfo(name, dims, GGML_F32, off))
            n = 4
            for d in dims:
                n *= d
            off += (n + alignment - 1) // alignment * alignment
        data = bytes(off)
    head = b"GGUF" + struct.pack("<I", version) + struct.pack(
        "<QQ", len(infos) if n_tensors is None else n_tensors, len(meta) if n_kv is None else n_kv)
    body = head + b"".join(meta) + b"".join(infos)
    pad = (-len(body)) % (alignment if alignment and alignment < (1 << 20) else 32)
    return body + bytes(pad) + data


def write(name, data, cmd, expect):
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(data)
    cases[name] = {"cmd": cmd, "expect": expect}


def g(name, data, expect):
    write(name, data, "run", expect)


# ---- safetensors -----------------------------------------------------------------------
ST_CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": E,
             "intermediate_size": FF, "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS,
             "num_hidden_layers": LAYERS, "vocab_size": len(VOCAB), "max_position_embeddings": 256,
             "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False}


def st_bytes(header, data=b"", header_len=None):
    h = json.dumps(header).encode() if not isinstance(header, bytes) else header
    return struct.pack("<Q", len(h) if header_len is None else header_len) + h + data


def st(name, blob, expect, config=None):
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(config or ST_CONFIG, f)
    with open(os.path.join(d, "model.safetensors"), "wb") as f:
        f.write(blob)
    cases[name] = {"cmd": "inspect", "expect": expect}


# ---- .pt (rotation directories) ------------------------------------------------------------
def zip_bytes(entries, compress=zipfile.ZIP_STORED):
    b = io.BytesIO()
    with zipfile.ZipFile(b, "w", compress) as z:
        for n, data in entries:
            z.writestr(n, data)
    return b.getvalue()


def pt_dir(name, k_blob, expect):
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    good = os.path.join(HERE, "..", "data", "pt", "rotation")
    for f in os.listdir(good):
        if f.startswith("v_rotation_"):
            shutil.copy(os.path.join(good, f), os.path.join(d, f))
    with open(os.path.join(d, "k_rotation_qqt_r_h_pbr.pt"), "wb") as f:
        f.write(k_blob)
    cases[name] = {"cmd": "rotations", "expect": expect}


def main():
    if os.path.isdir(OUT):
        shutil.rmtree(OUT)
    os.makedirs(OUT)
    T = model_tensors()
    g("good.gguf", gguf(model_meta(), T), "")  # the control: loads and generates
    # Header and counts.
    g("truncated_header.gguf", b"GGUF\x03\x00", "header")
    g("bad_magic.gguf", b"GGML" + gguf(model_meta(), T)[4:], "magic")
    g("version_99.gguf", gguf(model_meta(), T, version=99), "version")
    g("n_tensors_huge.gguf", gguf(model_meta(), T, n_tensors=1 << 62), "tensor")
    g("n_kv_huge.gguf", gguf(model_meta(), T, n_kv=(1 << 64) - 1), "metadata")
    g("key_length_huge.gguf", b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 1 << 62) + b"abc", "key")
    g("string_past_end.gguf", gguf([kv("general.name", STR, struct.pack("<Q", 1 << 40) + b"x")], []), "general.name")
    g("array_count_overflow.gguf",
      gguf([kv("tokenizer.ggml.scores", ARR, struct.pack("<IQ", F64, (1 << 61) + 1) + bytes(8))], []),
      "tokenizer.ggml.scores")
    g("array_of_huge_strings.gguf",
      gguf([kv("tokenizer.ggml.tokens", ARR, struct.pack("<IQ", STR, 3) + struct.pack("<Q", (1 << 64) - 8))], []),
      "tokenizer.ggml.tokens")
    g("unknown_value_type.gguf", gguf([kv("general.name", 99, b"")], []), "type")
    g("nested_arrays.gguf", gguf([kv("x", ARR, struct.pack("<IQ", ARR, 1) * 20000)], []), "x")
    # Tensor infos.
    g("tensor_dims_9.gguf", gguf(model_meta(), [], infos=[tinfo("token_embd.weight", [1] * 9)], data=b""), "token_embd.weight")
    g("tensor_dim_zero_count_overflow.gguf",
      gguf(model_meta(), [], infos=[tinfo("token_embd.weight", [1 << 32, 1 << 32, 1 << 32])], data=b""), "token_embd.weight")
    g("tensor_bytes_overflow.gguf",
      gguf(model_meta(), [], infos=[tinfo("token_embd.weight", [1 << 31, 1 << 31])], data=b""), "token_embd.weight")
    g("tensor_q8_0_partial_block.gguf",
      gguf(model_meta(), [], infos=[tinfo("token_embd.weight", [33, 2], ttype=8)], data=bytes(128)), "token_embd.weight")
    g("tensor_offset_past_end.gguf",
      gguf(model_meta(), [], infos=[tinfo("output_norm.weight", [E], GGML_F32, 1 << 20)], data=bytes(64)), "output_norm.weight")
    g("tensor_offset_wraps.gguf",
      gguf(model_meta(), [], infos=[tinfo("output_norm.weight", [E], GGML_F32, (1 << 64) - 32)], data=bytes(64)),
      "output_norm.weight")
    g("tensor_offset_unaligned.gguf",
      gguf(model_meta(), [], infos=[tinfo("output_norm.weight", [E], GGML_F32, 4)], data=bytes(64)), "output_norm.weight")
    g("tensor_unknown_type.gguf",
      gguf(model_meta(), [], infos=[tinfo("output_norm.weight", [E], 200, 0)], data=bytes(64)), "output_norm.weight")
    g("tensor_duplicate_name.gguf",
      gguf(model_meta(), [], infos=[tinfo("output_norm.weight", [E], GGML_F32, 0), tinfo("output_norm.weight", [E], GGML_F32, 32)],
           data=bytes(64)), "output_norm.weight")
    g("duplicate_key.gguf", gguf(model_meta() + [kv_u32("llama.block_count", 2)], T), "llama.block_count")
    # Alignment.
    g("alignment_0.gguf", gguf([kv_u32("general.alignment", 0)] + model_meta(), T), "general.alignment")
    g("alignment_3.gguf", gguf([kv_u32("general.alignment", 3)] + model_meta(), T), "general.alignment")
    g("alignment_huge.gguf", gguf([kv(("general.alignment"), U64, struct.pack("<Q", 1 << 40))] + model_meta(), T),
      "general.alignment")
    g("alignment_wrong_type.gguf", gguf([kv_str("general.alignment", "32")] + model_meta(), T), "general.alignment")
    # Hyperparameters.
    g("context_length_0.gguf", gguf(model_meta({"llama.context_length": kv_u32("llama.context_length", 0)}), T), "context")
    g("context_length_negative.gguf",
      gguf(model_meta({"llama.context_length": kv_i32("llama.context_length", -5)}), T), "context")
    g("head_count_0.gguf",
      gguf(model_meta({"llama.attention.head_count": kv_u32("llama.attention.head_count", 0)}), T), "head")
    g("heads_do_not_divide_embedding.gguf",
      gguf(model_meta({"llama.attention.head_count": kv_u32("llama.attention.head_count", 3),
                       "llama.attention.head_count_kv": kv_u32("llama.attention.head_count_kv", 3)}), T), "head")
    g("head_dim_0.gguf", gguf(model_meta({"llama.attention.key_length": kv_u32("llama.attention.key_length", 0)}), T),
      "key_length")
    g("head_dim_4.gguf", gguf(model_meta({"llama.attention.key_length": kv_u32("llama.attention.key_length", 4)}), T),
      "head_dim")
    g("kv_heads_do_not_divide_heads.gguf",
      gguf(model_meta({"llama.attention.head_count_kv": kv_u32("llama.attention.head_count_kv", 3)}), T), "head")
    g("block_count_huge.gguf",
      gguf(model_meta({"llama.block_count": kv_u32("llama.block_count", 1 << 31)}), T), "block")
    g("embedding_length_0.gguf",
      gguf(model_meta({"llama.embedding_length": kv_u32("llama.embedding_length", 0)}), T), "embedding_length")
    g("rms_eps_negative.gguf",
      gguf(model_meta({"llama.attention.layer_norm_rms_epsilon": kv_f32("llama.attention.layer_norm_rms_epsilon", -1.0)}), T),
      "eps")
    g("rope_freq_base_nan.gguf", gguf(model_meta({"llama.rope.freq_base": kv_f32("llama.rope.freq_base", float("nan"))}), T),
      "rope")
    g("unknown_architecture.gguf",
      gguf(model_meta({"general.architecture": kv_str("general.architecture", "mamba9")}), T), "mamba9")
    g("missing_tensor.gguf", gguf(model_meta(), [t for t in T if t[0] != "blk.0.attn_q.weight"]), "blk.0.attn_q.weight")
    g("tensor_wrong_shape.gguf",
      gguf(model_meta(), [(n, [E, E + 1]) if n == "blk.0.attn_q.weight" else (n, d) for n, d in T]), "blk.0.attn_q.weight")
    # Tokenizer.
    g("byte_token_minus_1.gguf",
      gguf(model_meta({"tokenizer.ggml.model": kv_str("tokenizer.ggml.model", "llama"),
                       "tokenizer.ggml.tokens": kv_str_arr("tokenizer.ggml.tokens", ["<unk>", "<0x-1>"] + VOCAB[2:]),
                       "tokenizer.ggml.token_type": kv_i32_arr("tokenizer.ggml.token_type", [2, 6] + [1] * 256)}), T),
      "tokenizer")
    g("token_types_short.gguf",
      gguf(model_meta({"tokenizer.ggml.token_type": kv_i32_arr("tokenizer.ggml.token_type", [1, 1])}), T),
      "tokenizer.ggml.token_type")
    g("bos_out_of_vocab.gguf",
      gguf(model_meta({"tokenizer.ggml.bos_token_id": kv_u32("tokenizer.ggml.bos_token_id", 1 << 30)}), T), "bos")
    g("vocab_smaller_than_embedding.gguf",
      gguf(model_meta({"tokenizer.ggml.tokens": kv_str_arr("tokenizer.ggml.tokens", VOCAB[:-1]),
                       "tokenizer.ggml.token_type": kv_i32_arr("tokenizer.ggml.token_type", [1] * 256 + [3])}), T),
      "vocab")

    # safetensors.
    f32 = struct.pack("<4f", 1, 2, 3, 4)
    st("st_header_past_end", st_bytes({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, f32, 1 << 20), "header")
    st("st_header_over_100mb", st_bytes(b"{}", b"", (100 << 20) + 1), "header")
    st("st_header_len_huge", st_bytes(b"{}", b"", (1 << 64) - 1), "header")
    st("st_not_json", st_bytes(b"{\"a\": [", f32), "JSON")
    st("st_header_not_object", st_bytes(b"[1, 2]", f32), "object")
    st("st_unknown_dtype", st_bytes({"a": {"dtype": "F99", "shape": [4], "data_offsets": [0, 16]}}, f32), "F99")
    st("st_offsets_reversed", st_bytes({"a": {"dtype": "F32", "shape": [4], "data_offsets": [16, 0]}}, f32), "data_offsets")
    st("st_offsets_past_end", st_bytes({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 1 << 40]}}, f32), "data_offsets")
    st("st_offsets_overlap", st_bytes({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
                                       "b": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}}, f32), "overlap")
    st("st_shape_mismatch", st_bytes({"a": {"dtype": "F32", "shape": [5], "data_offsets": [0, 16]}}, f32), "a")
    st("st_shape_overflow", st_bytes({"a": {"dtype": "F32", "shape": [1 << 40, 1 << 40], "data_offsets": [0, 16]}}, f32), "a")
    st("st_shape_negative", st_bytes({"a": {"dtype": "F32", "shape": [-4], "data_offsets": [0, 16]}}, f32), "shape")
    st("st_config_bad_heads", st_bytes({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, f32),
       "head", config=dict(ST_CONFIG, num_attention_heads=3))

    # .pt rotation files.
    pt_dir("pt_not_a_zip", b"this is not a zip archive", "zip")
    pt_dir("pt_zip_traversal", zip_bytes([("archive/../../../tmp/evil.pkl", b"\x80\x02N."), ("archive/data.pkl", b"\x80\x02N.")]),
           "outside the archive")
    bomb = zip_bytes([("archive/data.pkl", b"\x80\x02" + b"(" * (300 << 20))], zipfile.ZIP_DEFLATED)
    pt_dir("pt_zip_bomb", bomb, "data.pkl")
    for name, expect in [("global_os_system", "os.system"), ("reduce_builtins_eval", "builtins.eval"),
                         ("real_pickle_posix_system", "posix.system"), ("unknown_opcode", "opcode"),
                         ("no_stop", "truncated"), ("huge_string", "string"), ("absurd_numel", "storage '0'"),
                         ("view_out_of_storage", "storage '0'"), ("missing_storage", "archive/data/7"),
                         ("truncated_zip", "zip")]:
        with open(os.path.join(HERE, "..", "data", "pt", "hostile", name + ".pt"), "rb") as f:
            pt_dir("pt_" + name, f.read(), expect)
    with open(os.path.join(OUT, "expectations.json"), "w") as f:
        json.dump(cases, f, indent=1, sort_keys=True)
    print(f"{len(cases)} cases in {OUT}")


main()
