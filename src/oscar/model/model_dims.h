// The numbers of a decoder-only transformer that both engines run it by: the CPU's
// ModelConfig is these plus what reading a file needs (architecture, name, RoPE's
// parameters), and the device model is built from these and the RoPE table (RopeFreqs,
// which ops/rope.h's rope_freqs computes from those parameters).
// Plain C++ with no project includes, so that nvcc compiles it into the CUDA engine too.
#pragma once
#include <cstddef>
#include <vector>

namespace oscar {

// How RoPE pairs dimensions: `interleaved` rotates (2i, 2i+1) (llama.cpp's "normal" mode,
// used for GGUF Llama files whose Q/K rows the converter permuted); `neox` rotates
// (i, i + d/2) (HF rotate_half; Qwen2/Qwen3 GGUF and every safetensors model).
enum class RopeStyle { interleaved, neox };

// RoPE's table: the angle of pair i at position p is p·position_scale·inv_freq[i] (in double).
struct RopeFreqs {
  std::vector<double> inv_freq;  // [head_dim / 2]
  double position_scale = 1.0;   // linear scaling divides positions
  RopeStyle style = RopeStyle::neox;
};

struct ModelDims {
  int n_layers = 0;
  int n_embd = 0;           // hidden size
  int n_ff = 0;             // FFN inner size
  int n_heads = 0;          // query heads
  int n_kv_heads = 0;       // key/value heads (GQA when < n_heads)
  int head_dim = 0;         // usually n_embd / n_heads; Qwen3 sets it explicitly
  int n_vocab = 0;
  float rms_eps = 1e-5f;
  bool tied_embeddings = false;  // output projection reuses token_embd
  bool qkv_bias = false;         // Qwen2
  bool qk_norm = false;          // Qwen3: RMSNorm on q and k per head before RoPE

  // Parameters of the matrices (embeddings, attention, FFN; not the norms and biases).
  size_t n_params() const {
    const size_t e = size_t(n_embd), hd = size_t(head_dim);
    const size_t per_layer = e * hd * size_t(n_heads) * 2 + e * hd * size_t(n_kv_heads) * 2 + 3 * e * size_t(n_ff);
    return size_t(n_layers) * per_layer + size_t(n_vocab) * e * (tied_embeddings ? 1 : 2);
  }
};

}  // namespace oscar
