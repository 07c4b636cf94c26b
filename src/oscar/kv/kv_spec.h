// A KV cache format as a value. Every format is the same cache code with a different
// spec (which keeps the baselines honest): a full-precision dtype for the BF16 sink and
// recent windows, and an optional quantized history between them.
//
//   logical cache at length t:  [sink 0..S) ‖ [history S..r(t)) ‖ [recent r(t)..t)
//   r(t) = S + T·⌊max(0, t − S − W)/T⌋   (T = demote_tokens(): 1, or KIVI's token group)
//
// With quant == none there is no history: every token stays full precision.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace oscar {

enum class KvDtype { f32, bf16 };

// How history rows are stored.
enum class KvQuant {
  none,
  int8, int4, int2,        // asymmetric uniform per group, fp16 scale + zero
  int2_lloyd_max,          // Lloyd-Max thresholds, the reference's uniform dequantization
  int2_lloyd_max_exact,    // Lloyd-Max thresholds and exact Gaussian centroids (fp16 μ, σ)
  kivi2,                   // KIVI: keys per channel over token groups, values per token
};

const char* kv_quant_name(KvQuant q);  // "int2", "kivi2", ...

// Which rotation rows get before they are stored (the model applies it).
enum class KvRotation { none, hadamard, calibrated };

struct KvSpec {
  std::string mode = "bf16";      // the --kv name this spec came from
  KvDtype dtype = KvDtype::bf16;  // sink / recent / unquantized rows
  int block_tokens = 16;          // tokens per full-precision page
  KvQuant quant = KvQuant::none;
  int group = 128;                // quant group along head_dim (clamped to head_dim by the model)
  int sink = 64;                  // tokens kept full precision at the start
  int recent = 256;               // tokens kept full precision at the end
  int kivi_tokens = 32;           // KIVI key group along tokens (= its demotion step)
  float k_clip = 0.0f;            // quantile clip ratios (0: off); a rotation set may override
  float v_clip = 0.0f;
  KvRotation rotation = KvRotation::none;

  bool quantized() const { return quant != KvQuant::none; }
  int bits() const;                   // bits per history code (16/32 for none)
  int demote_tokens() const { return quant == KvQuant::kivi2 ? kivi_tokens : 1; }
  int fp_bytes_per_element() const { return dtype == KvDtype::f32 ? 4 : 2; }
  // First history token after which everything is recent, for a sequence of length t.
  int64_t history_end(int64_t t) const;
  std::string name() const { return mode; }

  // --kv values: bf16 f32 int8 int4 int2 int2-hadamard kivi2 int2-oscar int2-oscar-lloydmax
  // int2-oscar-lloydmax-exact.
  // Throws oscar::Error listing the valid names.
  static KvSpec parse(std::string_view kv);
  void validate() const;  // windows, group and clip ranges
};

// The geometry the cache holds: one K row and one V row of head_dim per (layer, KV head, token).
struct KvShape {
  int n_layers = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
};

}  // namespace oscar
