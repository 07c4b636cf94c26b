// ggml tensor types as numbered in GGUF files, their block geometry, and dequantization.
#pragma once
#include <cstddef>
#include <cstdint>

namespace oscar {

enum class GgmlType : uint32_t {
  f32 = 0, f16 = 1, q4_0 = 2, q4_1 = 3, q5_0 = 6, q5_1 = 7, q8_0 = 8, q8_1 = 9,
  q2_k = 10, q3_k = 11, q4_k = 12, q5_k = 13, q6_k = 14, q8_k = 15,
  i8 = 24, i16 = 25, i32 = 26, i64 = 27, f64 = 28, bf16 = 30,
};

const char* ggml_type_name(GgmlType t);          // "Q4_K", or "type(N)" when unknown
bool ggml_type_known(uint32_t raw);               // any type above with known geometry
bool ggml_type_dequantizable(GgmlType t);         // F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q4_K Q5_K Q6_K
int64_t ggml_block_elements(GgmlType t);          // elements per block (1 for plain types)
int64_t ggml_block_bytes(GgmlType t);             // bytes per block
// Bytes for a row of n elements; throws oscar::Error if n is not a multiple of the block.
uint64_t ggml_row_bytes(GgmlType t, int64_t n);

// Dequantizes n elements (a multiple of the block size) from `src` into `dst`.
// Throws oscar::Error for types that cannot be dequantized.
void dequantize_row(GgmlType t, const void* src, float* dst, int64_t n);

}  // namespace oscar
