// A KV cache format resolved for one model: what a KvSpec (the user's --kv, its windows and
// --kv-layers) and a rotation set make of every layer. The one description both engines
// run: Transformer::configure_kv builds it (kv_format()), and the device takes it as it is
// (engine/cuda: device_kv_format checks what the CUDA cache lacks, DeviceModel uploads it).
// KvSpec stays the request; this is the answer.
//
// Plain C++17 and header-only: nvcc and the CUDA backend's standalone build take it too.
#pragma once
#include <algorithm>
#include <cstddef>
#include <vector>

#include "oscar/kv/kv_spec.h"

namespace oscar {

// Bits of one history code: 0 for a layer whose rows stay BF16 (none, bf16_raw), 2, 4 or 8
// for the uniform codes; -1 for the codes only the CPU has (Lloyd-Max, KIVI).
inline int kv_code_bits(KvQuant q) {
  switch (q) {
    case KvQuant::none:
    case KvQuant::bf16_raw: return 0;
    case KvQuant::int2: return 2;
    case KvQuant::int4: return 4;
    case KvQuant::int8: return 8;
    default: return -1;
  }
}

// The uniform code of `bits` (0: none), for formats built by hand (tests, benchmarks).
inline KvQuant kv_quant_of_bits(int bits) {
  return bits == 2 ? KvQuant::int2 : bits == 4 ? KvQuant::int4 : bits == 8 ? KvQuant::int8 : KvQuant::none;
}

struct KvFormat {
  int sink = 64;     // S: full-precision tokens at the start
  int window = 256;  // W: full-precision recent tokens
  int group = 128;   // G: quantization group along head_dim (at most head_dim)
  // Per layer: how its K and V history rows are coded (none: the layer keeps every token
  // in full precision; bf16_raw: history rows stored as raw bf16, a BF16 layer of a mixed
  // CPU cache) and their quantile clip ratios (0: none).
  std::vector<KvQuant> k_quant, v_quant;
  std::vector<float> k_clip, v_clip;
  // One entry per layer, each R_K [d, d] row-major (keys, and queries, are rotated by it)
  // or empty (none).
  std::vector<std::vector<float>> rot_k;
  // Empty (none anywhere), or one entry per layer: R_V [d, d] applied to v on its way into
  // the cache and undone (·R_Vᵀ) on the attention output, or empty (none, or absorbed into
  // W_v / W_o).
  std::vector<std::vector<float>> rot_v;
  // Empty, or one entry per layer, each [n_kv_heads · d] or empty: subtracted from every key
  // after R_K before it is cached (--k-mean; softmax cancels the shift).
  std::vector<std::vector<float>> k_shift;
  // Empty, or one entry per layer, each [n_kv_heads · d] or empty: keys are divided by it
  // and queries multiplied by it before R_K (--k-scale; q·k unchanged). The CPU only.
  std::vector<std::vector<float>> k_scale;
  // Keys are cached without RoPE(b_k, t)·R_K, and each score gets q·a_t back in f32
  // (--k-bias-split, on a model with a key bias; attention/key_bias.h).
  bool k_bias_split = false;

  int n_layers() const { return int(k_quant.size()); }
  int bits(int layer) const { return kv_code_bits(k_quant[size_t(layer)]); }
  int v_bits(int layer) const { return kv_code_bits(v_quant[size_t(layer)]); }
  bool any_bf16_layer() const {
    return std::any_of(k_quant.begin(), k_quant.end(), [](KvQuant q) { return kv_code_bits(q) == 0; });
  }
  bool any_history() const {
    return std::any_of(k_quant.begin(), k_quant.end(), [](KvQuant q) { return kv_code_bits(q) != 0; });
  }
  // Layer l's entry of a per-layer list that may be empty as a whole: empty for none.
  static const std::vector<float>& of_layer(const std::vector<std::vector<float>>& per_layer, int layer) {
    static const std::vector<float> none;
    return per_layer.empty() ? none : per_layer[size_t(layer)];
  }

  // Uniform codes by bits per layer (0, 2, 4, 8), the same for K and V.
  void set_bits(const std::vector<int>& bits) {
    k_quant.clear();
    for (int b : bits) k_quant.push_back(kv_quant_of_bits(b));
    v_quant = k_quant;
  }
};

}  // namespace oscar
