// A tiny random Llama or Qwen2 (QKV bias) model built in code, for tests that need a
// Transformer but not a real model: 64-wide, 4 query / 2 KV heads, 50-token vocabulary.
#pragma once
#include <cstdint>

#include <string>

#include "oscar/kv/kv_spec.h"
#include "oscar/model/model_weights.h"
#include "test_util.h"

namespace oscar::test {

inline ModelWeights tiny_model(bool qwen2_bias, uint64_t seed, int n_layers = 2, int head_dim = 16) {
  ModelWeights w;
  ModelConfig& c = w.config;
  c.arch = qwen2_bias ? Arch::qwen2 : Arch::llama;
  c.name = "tiny";
  c.n_layers = n_layers;
  c.n_embd = 64;
  c.n_ff = 96;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = head_dim;
  c.n_vocab = 50;
  c.n_ctx_train = 1024;
  c.rope_style = RopeStyle::neox;
  c.qkv_bias = qwen2_bias;
  c.validate();
  const size_t E = 64, F = 96, V = 50, qd = 4 * size_t(head_dim), kvd = 2 * size_t(head_dim);
  auto rnd = [&](size_t n, float a) { return test::random_vector(n, seed++, -a, a); };
  auto mat = [&](size_t rows, size_t cols, float a) {
    return WeightMatrix::from_f32(rnd(rows * cols, a), int64_t(rows), int64_t(cols));
  };
  w.token_embd = mat(V, E, 1.0f);
  w.output_norm = rnd(E, 0.2f);
  for (float& x : w.output_norm) x += 1.0f;
  w.output = mat(V, E, 0.3f);
  for (int l = 0; l < c.n_layers; ++l) {
    LayerWeights lw;
    lw.attn_norm = rnd(E, 0.2f);
    lw.ffn_norm = rnd(E, 0.2f);
    for (float& x : lw.attn_norm) x += 1.0f;
    for (float& x : lw.ffn_norm) x += 1.0f;
    lw.wq = mat(qd, E, 0.4f);
    lw.wk = mat(kvd, E, 0.4f);
    lw.wv = mat(kvd, E, 0.4f);
    lw.wo = mat(E, qd, 0.2f);
    if (qwen2_bias) {
      lw.bq = rnd(qd, 0.3f);
      lw.bk = rnd(kvd, 0.3f);
      lw.bv = rnd(kvd, 0.3f);
    }
    lw.w_gate = mat(F, E, 0.2f);
    lw.w_up = mat(F, E, 0.2f);
    lw.w_down = mat(E, F, 0.2f);
    w.layers.push_back(std::move(lw));
  }
  return w;
}

// A KV type with a test's windows and group (short windows put tiny sequences into history
// quickly); group 0 keeps the type's own.
inline KvSpec tiny_kv_spec(const std::string& kv, int sink, int recent, int group = 0) {
  KvSpec s = KvSpec::parse(kv);
  s.sink = sink;
  s.recent = recent;
  if (group > 0) s.group = group;
  s.validate();
  return s;
}

}  // namespace oscar::test
