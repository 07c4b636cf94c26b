// A KV cache format as a value. Every format (BF16, and the quantized ones that
// follow) is the same cache code with a different spec, which keeps baselines honest.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace oscar {

enum class KvDtype { f32, bf16 };

struct KvSpec {
  KvDtype dtype = KvDtype::bf16;  // storage of K and V rows
  int block_tokens = 64;          // tokens per page; pages are the unit of allocation

  int bytes_per_element() const { return dtype == KvDtype::f32 ? 4 : 2; }
  double bits_per_element() const { return 8.0 * bytes_per_element(); }
  std::string name() const;
  // Parses the --kv flag value ("bf16", "f32"); throws oscar::Error listing the valid ones.
  static KvSpec parse(std::string_view kv);
};

// The geometry the cache holds: one K row and one V row of head_dim per (layer, KV head, token).
struct KvShape {
  int n_layers = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
};

}  // namespace oscar
