// A KV cache format as a value. Every format is the same cache code with a different
// spec (which keeps the baselines honest): a full-precision dtype for the BF16 sink and
// recent windows, and an optional quantized history between them.
//
//   logical cache at length t:  [sink 0..S) ‖ [history S..r(t)) ‖ [recent r(t)..t)
//   r(t) = S + T·⌊max(0, t − S − W)/T⌋   (T = demote_tokens(): 1, or KIVI's token group)
//
// With quant == none there is no history: every token stays full precision.
//
// Per-layer precision (--kv-layers "0-1:int4,27:int8"): the listed layers use another
// type; the windows, fp dtype, group and page sizes stay global, so every layer shares
// one segment layout and only the history rows' storage differs. A bf16 layer in such a
// cache keeps its history rows as raw bf16 (KvQuant::bf16_raw).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace oscar {

enum class KvDtype { f32, bf16 };

// How history rows are stored.
enum class KvQuant {
  none,
  int8, int4, int2,        // asymmetric uniform per group, fp16 scale + zero
  int2_lloyd_max,          // Lloyd-Max thresholds, the reference's uniform dequantization
  int2_lloyd_max_exact,    // Lloyd-Max thresholds and exact Gaussian centroids (fp16 μ, σ)
  kivi2,                   // KIVI: keys per channel over token groups, values per token
  bf16_raw,                // raw bf16 rows, no scale: a bf16 layer of a per-layer mixed cache
};

const char* kv_quant_name(KvQuant q);  // "int2", "kivi2", ...

// Which rotation rows get before they are stored (the model applies it).
enum class KvRotation { none, hadamard, calibrated };

// One --kv-layers item: layers [first, last] use the KV type `type` instead of the spec's.
struct KvLayerType {
  int first = 0, last = 0;  // inclusive
  std::string type;         // the --kv name, e.g. "int4"
  KvQuant quant = KvQuant::none;
  KvRotation rotation = KvRotation::none;
  float k_clip = 0.0f, v_clip = 0.0f;  // the type's defaults (a rotation set overrides for OSCAR layers)

  std::string item() const;  // "0-1:int4" / "27:int8"
};

// Parses --kv-layers: comma-separated "a-b:type" (inclusive) or "n:type" items. Types:
// bf16 int8 int4 int2 int2-hadamard int2-oscar int2-oscar-lloydmax int2-oscar-lloydmax-exact
// (kivi2 and f32 change the whole cache and cannot be mixed). n_layers > 0 also checks the
// range (n_layers ≤ 0: not known yet, see KvSpec::validate_layers). Throws oscar::Error
// naming the item for empty items, bad ranges, unknown types and overlaps. Sorted by first.
std::vector<KvLayerType> parse_kv_layers(std::string_view text, int n_layers = 0);

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
  // Keys are stored without the part a QKV bias contributes (RoPE(b_k, p), known exactly
  // from the position), which attention adds back in full precision (--k-bias-split).
  bool k_bias_split = false;
  // Calibrated layers subtract their rotation set's post-RoPE key mean from every key
  // before caching it (softmax cancels the shift exactly; LayerRotation::k_mean).
  bool k_mean = false;
  // Calibrated layers whose rotation set carries a per-channel key scale s (LayerRotation::
  // k_scale) store (k ⊘ s)·R_K and attend with (q ⊙ s)·R_K: q·k unchanged (--k-scale, opt-in).
  bool k_scale = false;
  // Wider history codes for the keys or the values alone (--kv-k-type / --kv-v-type int4 |
  // int8), in every quantized layer: one of the two may deserve the bits. none: as `quant`.
  KvQuant k_quant = KvQuant::none;
  KvQuant v_quant = KvQuant::none;
  KvRotation rotation = KvRotation::none;
  std::vector<KvLayerType> layer_types;  // --kv-layers overrides (disjoint, sorted); empty: uniform

  bool mixed() const { return !layer_types.empty(); }
  // Some layer keeps a history segment (all layers then do; bf16 layers as bf16_raw rows).
  bool quantized() const;
  int bits() const;                   // bits per history code (16/32 for none)
  int demote_tokens() const { return quant == KvQuant::kivi2 ? kivi_tokens : 1; }
  int fp_bytes_per_element() const { return dtype == KvDtype::f32 ? 4 : 2; }
  // First history token after which everything is recent, for a sequence of length t.
  int64_t history_end(int64_t t) const;
  std::string name() const;  // mode, and "+layers(0-1:int4,27:int8)" when mixed

  // What layer l uses: the overriding item's values, else the spec's own.
  KvQuant layer_quant(int l) const;  // none for a bf16 layer
  KvRotation layer_rotation(int l) const;
  float layer_k_clip(int l) const;
  float layer_v_clip(int l) const;
  std::string layer_mode(int l) const;
  bool uses_rotation(KvRotation r, int n_layers) const;  // some layer of [0, n_layers) uses r
  // Layer l as a plain (uniform) spec: same windows, group and dtype, that layer's type.
  KvSpec layer_spec(int l) const;

  // --kv values: bf16 f32 int8 int4 int2 int2-hadamard kivi2 int2-oscar int2-oscar-lloydmax
  // int2-oscar-lloydmax-exact.
  // Throws oscar::Error listing the valid names.
  static KvSpec parse(std::string_view kv);
  void validate() const;  // windows, group and clip ranges; what may be mixed
  void validate_layers(int n_layers) const;  // --kv-layers items inside [0, n_layers)
};

// The geometry the cache holds: one K row and one V row of head_dim per (layer, KV head, token).
struct KvShape {
  int n_layers = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
};

}  // namespace oscar
