// All weights of a model (shapes in comments, row-major). The matrices keep the format
// the file stores them in (WeightStorage::native: views of the mapped GGUF's quantized,
// F16 or BF16 rows, read by integer / converting kernels), or are dequantized to f32 at load
// (WeightStorage::f32: 4 bytes per parameter, the exact path the NumPy reference checks).
// Norms and biases are always f32.
#pragma once
#include <cstdint>
#include <vector>

#include "oscar/model/model_config.h"
#include "oscar/model/weight_source.h"
#include "oscar/qmat/weight_matrix.h"

namespace oscar {

using qmat::WeightMatrix;

enum class WeightStorage { f32, native };

struct LayerWeights {
  std::vector<float> attn_norm;          // [n_embd]
  WeightMatrix wq, wk, wv, wo;           // [n_heads·hd, n_embd], [n_kv·hd, n_embd] ×2, [n_embd, n_heads·hd]
  std::vector<float> bq, bk, bv;         // [n_heads·hd], [n_kv·hd] ×2; empty without QKV bias
  std::vector<float> q_norm, k_norm;     // [hd]; empty without q/k norm (Qwen3)
  std::vector<float> ffn_norm;           // [n_embd]
  WeightMatrix w_gate, w_up;             // [n_ff, n_embd]
  WeightMatrix w_down;                   // [n_embd, n_ff]
};

struct ModelWeights {
  ModelConfig config;
  WeightMatrix token_embd;               // [n_vocab, n_embd]
  std::vector<float> output_norm;        // [n_embd]
  WeightMatrix output;                   // [n_vocab, n_embd]; empty when tied to token_embd
  std::vector<LayerWeights> layers;      // [n_layers]

  const WeightMatrix& output_matrix() const { return output.empty() ? token_embd : output; }
  // Whether every W_v and W_o is an owned f32 matrix, into which R_V can be folded.
  bool v_rotation_absorbable() const;
  int64_t n_bytes() const;  // what the weights occupy (mapped bytes count for views)
};

// Loads and checks every tensor's shape against the config; errors name the tensor.
// native: matrices stay views where the source gives them (a GGUF), else f32.
ModelWeights load_model_weights(const WeightSource& src, WeightStorage storage = WeightStorage::f32);

}  // namespace oscar
