// Weights as a model file stores them, turned into what DeviceModel computes with, on the
// device: the ggml block formats (and F32 / F16 / BF16) dequantized with the arithmetic of
// the CPU reference (formats/dequantize.cpp: the same f32 products, no fused multiply-add,
// so the f32 values agree to the bit), rounded to BF16 (nearest even) or kept f32; and
// OSCAR's R_V folded into a layer's value and output projections, with sums in double as
// the CPU's absorb_v_rotation does. Raw pointers and a stream, nothing of the engine.
#pragma once
#include <cstdint>

#include <cuda_runtime.h>

namespace oscar::cuda {

// The stored element types the converters read (ggml's block layouts, little-endian).
enum class StoredType { f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0, q4_k, q5_k, q6_k };

struct StoredBlock {
  int elements;  // elements per block (1 for f32 / f16 / bf16)
  int bytes;     // bytes per block
};
StoredBlock stored_block(StoredType t);
const char* stored_type_name(StoredType t);

// n elements (a whole number of blocks; std::runtime_error otherwise) of type t at src
// (device: the stored bytes) into dst (device). Asynchronous on `stream`.
void stored_to_bf16(StoredType t, const void* src, uint16_t* dst, int64_t n, cudaStream_t stream);
void stored_to_f32(StoredType t, const void* src, float* dst, int64_t n, cudaStream_t stream);

// R_V (r: [d, d] row-major f32, device) folded into a layer's weights, in f32 in, BF16 out:
//  * value projection w [heads·d, cols]: each head's block of d rows becomes Rᵀ · block
//    (the model then emits v·R_V);
//  * output projection w [rows, heads·d]: each row's d-wide segment of each head becomes
//    segment · R (it then takes the rotated attention output).
void absorb_value_rows(const float* w, const float* r, uint16_t* out, int heads, int d, int64_t cols,
                       cudaStream_t stream);
void absorb_output_columns(const float* w, const float* r, uint16_t* out, int64_t rows, int heads, int d,
                           cudaStream_t stream);

}  // namespace oscar::cuda
