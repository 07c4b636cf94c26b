// WeightMatrix construction (shape and type checked once, here, so the products need not)
// and its dequantization to f32.
#include "oscar/qmat/weight_matrix.h"

#include <cstring>
#include <utility>

#include "oscar/core/error.h"
#include "oscar/ops/convert.h"
#include "oscar/ops/cpu_features.h"
#include "oscar/qmat/dequant.h"
#include "oscar/qmat/fdot.h"
#include "oscar/qmat/qdot.h"

namespace oscar::qmat {
namespace {

bool supported(GgmlType t) {
  return t == GgmlType::f32 || t == GgmlType::f16 || t == GgmlType::bf16 || qdot_act_format(t) != ActFormat::none;
}

}  // namespace

WeightMatrix WeightMatrix::from_f32(std::vector<float> values, int64_t rows, int64_t cols) {
  if (rows < 0 || cols < 0 || uint64_t(values.size()) != uint64_t(rows) * uint64_t(cols))
    fail("WeightMatrix::from_f32: {} values for a [{}, {}] F32 matrix", values.size(), rows, cols);
  WeightMatrix w;
  w.rows_ = rows;
  w.cols_ = cols;
  w.row_bytes_ = uint64_t(cols) * sizeof(float);
  w.owned_ = std::move(values);
  w.data_ = reinterpret_cast<const uint8_t*>(w.owned_.data());
  return w;
}

WeightMatrix& WeightMatrix::operator=(const WeightMatrix& o) {
  if (this == &o) return *this;
  type_ = o.type_;
  rows_ = o.rows_;
  cols_ = o.cols_;
  row_bytes_ = o.row_bytes_;
  owned_ = o.owned_;
  keep_alive_ = o.keep_alive_;
  data_ = owned_.empty() ? o.data_ : reinterpret_cast<const uint8_t*>(owned_.data());
  return *this;
}

WeightMatrix WeightMatrix::view(GgmlType type, const void* data, int64_t rows, int64_t cols,
                                std::shared_ptr<const void> keep_alive) {
  if (!supported(type))
    fail("WeightMatrix::view: type {} is not supported (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, "
         "Q5_K, Q6_K), shape [{}, {}]",
         ggml_type_name(type), rows, cols);
  const int64_t block = ggml_block_elements(type);
  if (rows < 0 || cols < 0 || cols % block != 0)
    fail("WeightMatrix::view: bad shape [{}, {}] for type {} (rows, cols >= 0, cols a multiple of {})", rows, cols,
         ggml_type_name(type), block);
  if (data == nullptr && rows > 0 && cols > 0)
    fail("WeightMatrix::view: no data for a {} matrix of shape [{}, {}]", ggml_type_name(type), rows, cols);
  WeightMatrix w;
  w.type_ = type;
  w.rows_ = rows;
  w.cols_ = cols;
  w.row_bytes_ = ggml_row_bytes(type, cols);
  w.data_ = static_cast<const uint8_t*>(data);
  w.keep_alive_ = std::move(keep_alive);
  return w;
}

void WeightMatrix::dequantize_rows(int64_t r0, int64_t r1, float* out) const {
  OSCAR_CHECK(0 <= r0 && r0 <= r1 && r1 <= rows_, "rows [{}, {}) of a {}-row matrix", r0, r1, rows_);
  const bool avx2 = use_avx2();
  for (int64_t r = r0; r < r1; ++r) {
    float* dst = out + (r - r0) * cols_;
    switch (type_) {
      case GgmlType::f32:
        std::memcpy(dst, row(r), size_t(cols_) * sizeof(float));
        break;
      case GgmlType::f16:  // F16C widening is exact: same values as the scalar path
        if (avx2) {
          f16_to_f32_avx2(row(r), dst, cols_);
        } else {
          dequantize_row(type_, row(r), dst, cols_);
        }
        break;
      case GgmlType::bf16:
        bf16_to_f32(reinterpret_cast<const bf16*>(row(r)), dst, cols_);
        break;
      case GgmlType::q6_k:
        if (avx2) {
          dequantize_q6_k_avx2(row(r), dst, cols_);
        } else {
          dequantize_row(type_, row(r), dst, cols_);
        }
        break;
      default:
        dequantize_row(type_, row(r), dst, cols_);
    }
  }
}

std::vector<float> WeightMatrix::to_f32() const {
  std::vector<float> out(size_t(rows_ * cols_));
  dequantize_rows(0, rows_, out.data());
  return out;
}

}  // namespace oscar::qmat
