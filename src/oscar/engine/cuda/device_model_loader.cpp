#include "oscar/engine/cuda/device_model_loader.h"

#include <algorithm>

#include "oscar/core/dtype.h"
#include "oscar/core/error.h"
#include "oscar/ops/rope.h"

namespace oscar {
namespace {

std::vector<uint16_t> to_bf16(const WeightMatrix& m) {
  const size_t n = size_t(m.rows()) * size_t(m.cols());
  std::vector<float> copy;
  const float* x = m.f32();
  if (!x) {
    copy = m.to_f32();
    x = copy.data();
  }
  std::vector<uint16_t> y(n);
  std::transform(x, x + n, y.begin(), [](float f) { return f32_to_bf16(f).bits; });
  return y;
}

}  // namespace

void check_device_model(const ModelConfig& c) {
  if (c.head_dim != 64 && c.head_dim != 128)
    fail("--device cuda: head_dim {} is not supported (64 or 128)", c.head_dim);
}

cuda::HostModel device_host_model(const Transformer& t) {
  const ModelWeights& w = t.weights();
  cuda::HostModel m;
  check_device_model(w.config);
  m.dims = w.config;
  m.rope = rope_freqs(w.config);
  m.token_embd = to_bf16(w.token_embd);
  if (!w.config.tied_embeddings) m.output = to_bf16(w.output.empty() ? w.token_embd : w.output);
  m.output_norm = w.output_norm;
  for (const LayerWeights& l : w.layers) {
    cuda::HostLayer h;
    h.wq = to_bf16(l.wq), h.wk = to_bf16(l.wk), h.wv = to_bf16(l.wv), h.wo = to_bf16(l.wo);
    h.w_gate = to_bf16(l.w_gate), h.w_up = to_bf16(l.w_up), h.w_down = to_bf16(l.w_down);
    h.attn_norm = l.attn_norm, h.ffn_norm = l.ffn_norm;
    h.bq = l.bq, h.bk = l.bk, h.bv = l.bv, h.q_norm = l.q_norm, h.k_norm = l.k_norm;
    m.layers.push_back(std::move(h));
  }
  return m;
}

const KvFormat& device_kv_format(const Transformer& t) {
  const KvSpec& spec = t.kv_spec();
  if (spec.dtype != KvDtype::bf16) fail("--device cuda: the KV cache must be bf16 (not {})", spec.mode);
  // The prologue subtracts one shift after R_K but has no per-channel scale of q and k yet.
  if (spec.k_scale) fail("--k-scale is not supported on --device cuda yet");
  if (spec.k_quant != KvQuant::none || spec.v_quant != KvQuant::none)
    fail("--kv-k-type / --kv-v-type are not supported on --device cuda yet");
  const KvFormat& f = t.kv_format();
  for (int l = 0; l < f.n_layers(); ++l) {
    const int bits = f.bits(l);
    if (bits < 0)
      fail("--device cuda: layer {} uses {} history, which the CUDA cache does not have (int2/int4/int8 and bf16 only)",
           l, kv_quant_name(f.k_quant[size_t(l)]));
    if (f.v_bits(l) != bits) fail("--device cuda: layer {} stores K and V in different formats", l);
    if (bits != 0 && t.k_history_format(l).group != f.group)
      fail("--device cuda: layer {} has group {}, the cache {}", l, t.k_history_format(l).group, f.group);
  }
  return f;
}

}  // namespace oscar
