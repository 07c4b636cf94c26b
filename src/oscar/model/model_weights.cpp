#include "oscar/model/model_weights.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "oscar/core/error.h"

namespace oscar {

namespace {
std::vector<float> load(const WeightSource& src, const std::string& name, std::vector<int64_t> want) {
  const std::vector<int64_t> got = src.shape(name);
  if (got != want) fail("tensor '{}' has shape [{}], expected [{}]", name, fmt::join(got, ", "), fmt::join(want, ", "));
  std::vector<float> w = src.load_f32(name);
  OSCAR_CHECK(int64_t(w.size()) == [&] { int64_t n = 1; for (auto d : want) n *= d; return n; }(),
              "tensor '{}' loaded {} values", name, w.size());
  return w;
}

std::vector<float> load_optional(const WeightSource& src, const std::string& name, bool present,
                                 std::vector<int64_t> want) {
  return present ? load(src, name, std::move(want)) : std::vector<float>{};
}
}  // namespace

int64_t ModelWeights::n_bytes() const {
  int64_t n = int64_t(token_embd.size() + output_norm.size() + output.size());
  for (const auto& l : layers) {
    for (const auto* v : {&l.attn_norm, &l.wq, &l.wk, &l.wv, &l.wo, &l.bq, &l.bk, &l.bv, &l.q_norm, &l.k_norm,
                          &l.ffn_norm, &l.w_gate, &l.w_up, &l.w_down})
      n += int64_t(v->size());
  }
  return n * int64_t(sizeof(float));
}

ModelWeights load_model_weights(const WeightSource& src) {
  ModelWeights w;
  w.config = src.config();
  const ModelConfig& c = w.config;
  const int64_t E = c.n_embd, hd = c.head_dim, qd = int64_t(c.n_heads) * hd, kvd = int64_t(c.n_kv_heads) * hd;
  w.token_embd = load(src, "token_embd.weight", {c.n_vocab, E});
  w.output_norm = load(src, "output_norm.weight", {E});
  if (!c.tied_embeddings) w.output = load(src, "output.weight", {c.n_vocab, E});
  w.layers.resize(size_t(c.n_layers));
  for (int i = 0; i < c.n_layers; ++i) {
    LayerWeights& l = w.layers[size_t(i)];
    const std::string p = fmt::format("blk.{}.", i);
    l.attn_norm = load(src, p + "attn_norm.weight", {E});
    l.wq = load(src, p + "attn_q.weight", {qd, E});
    l.wk = load(src, p + "attn_k.weight", {kvd, E});
    l.wv = load(src, p + "attn_v.weight", {kvd, E});
    l.wo = load(src, p + "attn_output.weight", {E, qd});
    l.bq = load_optional(src, p + "attn_q.bias", c.qkv_bias, {qd});
    l.bk = load_optional(src, p + "attn_k.bias", c.qkv_bias, {kvd});
    l.bv = load_optional(src, p + "attn_v.bias", c.qkv_bias, {kvd});
    l.q_norm = load_optional(src, p + "attn_q_norm.weight", c.qk_norm, {hd});
    l.k_norm = load_optional(src, p + "attn_k_norm.weight", c.qk_norm, {hd});
    l.ffn_norm = load(src, p + "ffn_norm.weight", {E});
    l.w_gate = load(src, p + "ffn_gate.weight", {c.n_ff, E});
    l.w_up = load(src, p + "ffn_up.weight", {c.n_ff, E});
    l.w_down = load(src, p + "ffn_down.weight", {E, c.n_ff});
  }
  return w;
}

}  // namespace oscar
