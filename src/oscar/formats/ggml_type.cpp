// The ggml type table: names and block geometry (elements and bytes per block),
// as numbered in GGUF files. Geometry follows ggml's block structs.
#include "oscar/formats/ggml_type.h"

#include <limits>

#include "oscar/core/error.h"

namespace oscar {
namespace {

struct TypeTraits {
  const char* name;
  int64_t block_elements;  // 0: unknown type
  int64_t block_bytes;
  bool dequantizable;
};

constexpr int64_t qk_k = 256;  // super-block size of the K-quants

TypeTraits traits_of(uint32_t raw) {
  switch (GgmlType(raw)) {
    case GgmlType::f32: return {"F32", 1, 4, true};
    case GgmlType::f16: return {"F16", 1, 2, true};
    case GgmlType::q4_0: return {"Q4_0", 32, 2 + 16, true};
    case GgmlType::q4_1: return {"Q4_1", 32, 2 + 2 + 16, true};
    case GgmlType::q5_0: return {"Q5_0", 32, 2 + 4 + 16, true};
    case GgmlType::q5_1: return {"Q5_1", 32, 2 + 2 + 4 + 16, true};
    case GgmlType::q8_0: return {"Q8_0", 32, 2 + 32, true};
    case GgmlType::q8_1: return {"Q8_1", 32, 4 + 4 + 32, false};
    case GgmlType::q2_k: return {"Q2_K", qk_k, 2 + 2 + qk_k / 16 + qk_k / 4, false};
    case GgmlType::q3_k: return {"Q3_K", qk_k, 2 + qk_k / 4 + qk_k / 8 + 12, false};
    case GgmlType::q4_k: return {"Q4_K", qk_k, 2 + 2 + 12 + qk_k / 2, true};
    case GgmlType::q5_k: return {"Q5_K", qk_k, 2 + 2 + 12 + qk_k / 8 + qk_k / 2, true};
    case GgmlType::q6_k: return {"Q6_K", qk_k, qk_k / 2 + qk_k / 4 + qk_k / 16 + 2, true};
    case GgmlType::q8_k: return {"Q8_K", qk_k, 4 + qk_k + qk_k / 8, false};
    case GgmlType::i8: return {"I8", 1, 1, false};
    case GgmlType::i16: return {"I16", 1, 2, false};
    case GgmlType::i32: return {"I32", 1, 4, false};
    case GgmlType::i64: return {"I64", 1, 8, false};
    case GgmlType::f64: return {"F64", 1, 8, false};
    case GgmlType::bf16: return {"BF16", 1, 2, true};
  }
  return {nullptr, 0, 0, false};
}

TypeTraits known_traits(GgmlType t) {
  const TypeTraits tr = traits_of(uint32_t(t));
  if (tr.block_elements == 0) fail("unknown ggml type {}", uint32_t(t));
  return tr;
}

}  // namespace

const char* ggml_type_name(GgmlType t) {
  const TypeTraits tr = traits_of(uint32_t(t));
  if (tr.name) return tr.name;
  // Unknown types are rare and only reach error messages; a small ring of buffers keeps
  // the returned pointer valid long enough to format it.
  static thread_local char buf[4][24];
  static thread_local int next = 0;
  char* b = buf[next++ & 3];
  const auto r = fmt::format_to_n(b, sizeof(buf[0]) - 1, "type({})", uint32_t(t));
  *r.out = '\0';
  return b;
}

bool ggml_type_known(uint32_t raw) { return traits_of(raw).block_elements != 0; }

bool ggml_type_dequantizable(GgmlType t) { return traits_of(uint32_t(t)).dequantizable; }

int64_t ggml_block_elements(GgmlType t) { return known_traits(t).block_elements; }

int64_t ggml_block_bytes(GgmlType t) { return known_traits(t).block_bytes; }

uint64_t ggml_row_bytes(GgmlType t, int64_t n) {
  const TypeTraits tr = known_traits(t);
  if (n < 0) fail("{} row of {} elements: negative length", tr.name, n);
  if (n % tr.block_elements != 0)
    fail("{} row of {} elements is not a multiple of the block size {}", tr.name, n, tr.block_elements);
  // Q8_K stores more bytes than elements: the product can exceed 64 bits for hostile n.
  const uint64_t blocks = uint64_t(n / tr.block_elements);
  if (blocks > std::numeric_limits<uint64_t>::max() / uint64_t(tr.block_bytes))
    fail("{} row of {} elements: byte size overflows", tr.name, n);
  return blocks * uint64_t(tr.block_bytes);
}

}  // namespace oscar
