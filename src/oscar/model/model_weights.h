// All weights of a model, dequantized to f32 at load (shapes in comments, row-major).
// Memory cost: 4 bytes per parameter — 0.54 GB for SmolLM2-135M, 7 GB for a 1.5B model.
// f32 keeps the forward exact against the reference; quantized matmuls can come later.
#pragma once
#include <cstdint>
#include <vector>

#include "oscar/model/model_config.h"
#include "oscar/model/weight_source.h"

namespace oscar {

struct LayerWeights {
  std::vector<float> attn_norm;          // [n_embd]
  std::vector<float> wq, wk, wv, wo;     // [n_heads·hd, n_embd], [n_kv·hd, n_embd] ×2, [n_embd, n_heads·hd]
  std::vector<float> bq, bk, bv;         // [n_heads·hd], [n_kv·hd] ×2; empty without QKV bias
  std::vector<float> q_norm, k_norm;     // [hd]; empty without q/k norm (Qwen3)
  std::vector<float> ffn_norm;           // [n_embd]
  std::vector<float> w_gate, w_up;       // [n_ff, n_embd]
  std::vector<float> w_down;             // [n_embd, n_ff]
};

struct ModelWeights {
  ModelConfig config;
  std::vector<float> token_embd;         // [n_vocab, n_embd]
  std::vector<float> output_norm;        // [n_embd]
  std::vector<float> output;             // [n_vocab, n_embd]; empty when tied to token_embd
  std::vector<LayerWeights> layers;      // [n_layers]

  const float* output_matrix() const { return output.empty() ? token_embd.data() : output.data(); }
  int64_t n_bytes() const;
};

// Loads and checks every tensor's shape against the config; errors name the tensor.
ModelWeights load_model_weights(const WeightSource& src);

}  // namespace oscar
