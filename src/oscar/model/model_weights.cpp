#include "oscar/model/model_weights.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "oscar/core/error.h"

namespace oscar {

namespace {
void check_shape(const WeightSource& src, const std::string& name, const std::vector<int64_t>& want) {
  const std::vector<int64_t> got = src.shape(name);
  if (got != want) fail("tensor '{}' has shape [{}], expected [{}]", name, fmt::join(got, ", "), fmt::join(want, ", "));
}

std::vector<float> load(const WeightSource& src, const std::string& name, std::vector<int64_t> want) {
  check_shape(src, name, want);
  std::vector<float> w = src.load_f32(name);
  OSCAR_CHECK(int64_t(w.size()) == [&] { int64_t n = 1; for (auto d : want) n *= d; return n; }(),
              "tensor '{}' loaded {} values", name, w.size());
  return w;
}

std::vector<float> load_optional(const WeightSource& src, const std::string& name, bool present,
                                 std::vector<int64_t> want) {
  return present ? load(src, name, std::move(want)) : std::vector<float>{};
}

// A [rows, cols] matrix: a view of the stored rows (native, where the source has them),
// else dequantized to f32. A view's type must have a kernel: WeightMatrix::view says which.
WeightMatrix load_matrix(const WeightSource& src, const std::string& name, int64_t rows, int64_t cols,
                         WeightStorage storage) {
  if (storage == WeightStorage::native) {
    check_shape(src, name, {rows, cols});
    if (std::optional<WeightSource::RawTensor> r = src.raw(name)) {
      try {
        return WeightMatrix::view(r->type, r->data, rows, cols, std::move(r->keep_alive));
      } catch (const Error& e) {
        fail("tensor '{}': {}", name, e.what());
      }
    }
  }
  return WeightMatrix::from_f32(load(src, name, {rows, cols}), rows, cols);
}
}  // namespace

bool ModelWeights::v_rotation_absorbable() const {
  for (const LayerWeights& l : layers)
    if (!l.wv.owns_f32() || !l.wo.owns_f32()) return false;
  return true;
}

int64_t ModelWeights::n_bytes() const {
  int64_t n = int64_t(token_embd.bytes() + output.bytes());
  int64_t floats = int64_t(output_norm.size());
  for (const auto& l : layers) {
    for (const WeightMatrix* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) n += int64_t(m->bytes());
    for (const auto* v : {&l.attn_norm, &l.bq, &l.bk, &l.bv, &l.q_norm, &l.k_norm, &l.ffn_norm})
      floats += int64_t(v->size());
  }
  return n + floats * int64_t(sizeof(float));
}

ModelWeights load_model_weights(const WeightSource& src, WeightStorage storage) {
  ModelWeights w;
  w.config = src.config();
  const ModelConfig& c = w.config;
  const int64_t E = c.n_embd, hd = c.head_dim, qd = int64_t(c.n_heads) * hd, kvd = int64_t(c.n_kv_heads) * hd;
  w.token_embd = load_matrix(src, "token_embd.weight", c.n_vocab, E, storage);
  w.output_norm = load(src, "output_norm.weight", {E});
  if (!c.tied_embeddings) w.output = load_matrix(src, "output.weight", c.n_vocab, E, storage);
  w.layers.resize(size_t(c.n_layers));
  for (int i = 0; i < c.n_layers; ++i) {
    LayerWeights& l = w.layers[size_t(i)];
    const std::string p = fmt::format("blk.{}.", i);
    l.attn_norm = load(src, p + "attn_norm.weight", {E});
    l.wq = load_matrix(src, p + "attn_q.weight", qd, E, storage);
    l.wk = load_matrix(src, p + "attn_k.weight", kvd, E, storage);
    l.wv = load_matrix(src, p + "attn_v.weight", kvd, E, storage);
    l.wo = load_matrix(src, p + "attn_output.weight", E, qd, storage);
    l.bq = load_optional(src, p + "attn_q.bias", c.qkv_bias, {qd});
    l.bk = load_optional(src, p + "attn_k.bias", c.qkv_bias, {kvd});
    l.bv = load_optional(src, p + "attn_v.bias", c.qkv_bias, {kvd});
    l.q_norm = load_optional(src, p + "attn_q_norm.weight", c.qk_norm, {hd});
    l.k_norm = load_optional(src, p + "attn_k_norm.weight", c.qk_norm, {hd});
    l.ffn_norm = load(src, p + "ffn_norm.weight", {E});
    l.w_gate = load_matrix(src, p + "ffn_gate.weight", c.n_ff, E, storage);
    l.w_up = load_matrix(src, p + "ffn_up.weight", c.n_ff, E, storage);
    l.w_down = load_matrix(src, p + "ffn_down.weight", E, c.n_ff, storage);
  }
  return w;
}

}  // namespace oscar
