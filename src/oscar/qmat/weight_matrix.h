// A linear layer's weight [rows = out_features, cols = in_features], row-major, kept in the
// format it has on disk: f32 (owned, the exact reference path), or a view of F16 / BF16 /
// block-quantized rows inside a mapped model file (no copy; the file outlives the view
// through `keep_alive`).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "oscar/formats/ggml_type.h"

namespace oscar::qmat {

class WeightMatrix {
 public:
  WeightMatrix() = default;
  // A copy of an owned matrix copies its values (data_ then points at the copy's own).
  WeightMatrix(const WeightMatrix& o) { *this = o; }
  WeightMatrix& operator=(const WeightMatrix& o);
  WeightMatrix(WeightMatrix&&) noexcept = default;  // a moved vector keeps its buffer
  WeightMatrix& operator=(WeightMatrix&&) noexcept = default;
  // Owned f32 values [rows, cols].
  static WeightMatrix from_f32(std::vector<float> values, int64_t rows, int64_t cols);
  // rows × ggml_row_bytes(type, cols) bytes at `data`, owned by `keep_alive`. `type` is F32,
  // F16, BF16 or a format with a qdot kernel; anything else throws oscar::Error naming it.
  static WeightMatrix view(GgmlType type, const void* data, int64_t rows, int64_t cols,
                           std::shared_ptr<const void> keep_alive);

  GgmlType type() const { return type_; }
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  bool empty() const { return rows_ == 0; }
  uint64_t row_bytes() const { return row_bytes_; }
  uint64_t bytes() const { return row_bytes_ * uint64_t(rows_); }  // what a product reads
  const uint8_t* row(int64_t r) const { return data_ + uint64_t(r) * row_bytes_; }
  // The f32 values when type() is F32 (owned or mapped), else nullptr.
  const float* f32() const { return type_ == GgmlType::f32 ? reinterpret_cast<const float*>(data_) : nullptr; }

  // The owned f32 values of from_f32 (writable: rotations fold into them), else nullptr.
  float* mutable_f32() { return owned_.empty() ? nullptr : owned_.data(); }
  bool owns_f32() const { return !owned_.empty(); }

  // Rows [r0, r1) as f32 into out[(r1 - r0) × cols].
  void dequantize_rows(int64_t r0, int64_t r1, float* out) const;
  std::vector<float> to_f32() const;

 private:
  GgmlType type_ = GgmlType::f32;
  int64_t rows_ = 0, cols_ = 0;
  uint64_t row_bytes_ = 0;
  const uint8_t* data_ = nullptr;
  std::vector<float> owned_;                // from_f32
  std::shared_ptr<const void> keep_alive_;  // view
};

// y[m, n] = x[m, k] · wᵀ (+ bias[n]) for w [n, k] in any WeightMatrix format. Threaded over
// the output rows on default_pool(); nothing nests with BLAS.
//   - F32: matmul() of ops/matmul.h, unchanged (matvec for m = 1, sgemm above).
//   - F16 / BF16: rows converted in registers, f32 products.
//   - block formats: each x row quantized once to its ActFormat (8-bit blocks of 32 for the
//     legacy quants, super-blocks of 256 for the K-quants), then the qdot kernel per
//     (weight row, x row), each weight row read once for all m rows. Every output row
//     depends only on its x row (the panel-into-sgemm design of linear_paths.h is kept
//     for measurement, not used: its sums depend on the shape).
void linear(const WeightMatrix& w, const float* x, const float* bias, float* y, int64_t m);

// As linear(), but each output row is bit-identical to what linear(m = 1) gives for its x
// row (never the sgemm path), so a sequence decodes to the same tokens alone or in a batch.
// F32 goes to matmul_decode().
void linear_decode(const WeightMatrix& w, const float* x, const float* bias, float* y, int64_t m);

// The plain reference: w dequantized to f32, products in double. For tests.
void linear_ref(const WeightMatrix& w, const float* x, const float* bias, float* y, int64_t m);

}  // namespace oscar::qmat
