// linear(), linear_decode() and linear_ref() of weight_matrix.h: F32 to ops/matmul, the
// other formats through row kernels (decode) or dequantized panels into sgemm (prefill).
#include <cblas.h>
#include <xmmintrin.h>

#include <algorithm>
#include <cctype>
#include <string>
#include <vector>

#include "oscar/core/error.h"
#include "oscar/core/thread_pool.h"
#include "oscar/ops/cpu_features.h"
#include "oscar/ops/matmul.h"
#include "oscar/qmat/fdot.h"
#include "oscar/qmat/linear_paths.h"
#include "oscar/qmat/qdot.h"
#include "oscar/qmat/weight_matrix.h"

namespace oscar::qmat {
namespace {

// Output rows per pool grain: 32 floats = 128 bytes, so where n·4 is a multiple of 64 the
// split between two threads falls on a cache-line boundary of every y row; and the pool
// hands each thread one contiguous range, so there is one such split per y row anyway.
constexpr int64_t row_grain = 32;

// Panel cap for (b): 4 Mi floats = 16 MB of f32 scratch (kept per calling thread). Panels
// of 256, 1024, 4096 rows or the whole matrix (up to 55 MB) timed the same within noise
// for the Qwen2.5-1.5B Q4_K shapes at m = 64 and 512, so the smaller footprint wins.
constexpr int64_t panel_floats = int64_t(4) << 20;

// The crossover of linear(): (b) from m = 48 x rows on, where OpenBLAS has AVX2-class
// kernels (blas_sgemm_is_fast). Measured on random weights with OpenBLAS 0.3.21 forced to
// its "Haswell" kernels (what an AVX2 EPYC gets). The dev box is a shared 2-core Xeon whose
// other tenants halve any 2-thread wall time now and then, so the rule rests on one thread
// (pool and OpenBLAS), process CPU time, best of 3: time(b) / time(a), < 1 where the panels
// are faster, as the range over each row's shapes:
//                                                m = 8      16        32        48        64       512
//   SmolLM2-135M Q4_1, Q8_0 (k, n = 576 × 192 … 49152, 1536 × 576)
//                                          1.81-2.19 1.08-1.32 0.76-0.96 0.61-0.81 0.60-0.77 0.45-0.57
//   Qwen2.5-1.5B Q4_K (1536 × 256 … 8960, 8960 × 1536)
//                                          2.30-2.64 1.40-1.61 0.99-1.22 0.85-1.08 0.77-1.00 0.61-0.66
//   Qwen2.5-1.5B Q6_K                      1.65-2.07 1.03-1.23 0.74-0.97 0.64-0.83 0.59-0.75 0.46-0.51
//   Qwen2.5-1.5B F16                       1.98-2.42 1.14-1.46 0.85-1.04 0.70-0.88 0.53-0.83 0.32-0.56
// (a) runs at 36-53 GFLOP/s a core (qdot) and 23-51 (fdot; F16 at k = 8960 lowest), about
// flat in m; (b) at 70-82 for m = 512. At 48 every shape wins but Q4_K 8960 × 1536 (1.08),
// the fastest kernel on its longest rows. With 2 threads (best of interleaved wall-clock
// trials) the picture is the same: m = 48 gives 0.44-1.01; at m = 512, (a) 70-105 GFLOP/s
// in quiet phases (F16 at k = 8960: 30) against (b) 140-157.
// The Q4_K / Q6_K rows predate the K-quants' ActQ8KBlock kernels, which made (a) 1.4-1.6×
// faster for them at m = 64 (bench/qmat/bench_linear_rows.cpp): their crossover has moved
// up and was not measured again (this box's OpenBLAS does not pass blas_sgemm_is_fast).
constexpr int64_t panel_min_m = 48;

void fill_bias(const float* bias, float* y, int64_t m, int64_t n) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) y[i * n + j] = bias ? bias[j] : 0.0f;
}

void check_args(const WeightMatrix& w, const float* x, float* y, int64_t m) {
  OSCAR_CHECK(m >= 0, "m = {}", m);
  OSCAR_CHECK(m == 0 || w.rows() == 0 || (y != nullptr && (x != nullptr || w.cols() == 0)),
              "null x or y for a {} linear of shape [{}, {}]", ggml_type_name(w.type()), w.rows(), w.cols());
}

// Weight rows per tile of the row kernels: a tile meets every x row before the next tile,
// so each x row is fetched from L2 once per tile rather than once per weight row (at
// m = 512, k = 8960 the quantized x alone is 5 MB). Block formats: ≤ 16 KB of weights (in
// L1). F16 / BF16 read f32 x rows, 4k bytes each, so their tile is allowed 64 KB (in L2):
// for k = 8960 that is 3 rows instead of 1, and single-thread CPU time at m = 64 / 256 went
// from 19 / 14 to 24 / 21 GFLOP/s (the block formats measured the same with either budget).
int64_t weight_tile(const WeightMatrix& w) {
  const uint64_t budget = w.type() == GgmlType::f16 || w.type() == GgmlType::bf16 ? 65536 : 16384;
  return std::clamp<int64_t>(int64_t(budget / std::max<uint64_t>(w.row_bytes(), 1)), 1, row_grain);
}

// How far ahead of the row being multiplied its weights are prefetched, in bytes. A decode
// step streams every weight once from DRAM, and with the hardware prefetcher alone the
// loads and the arithmetic ran mostly in series. bench/qmat/bench_decode_sweep.cpp (a
// Qwen2.5-1.5B-shaped sweep of random Q4_K / Q6_K rows, 980 MB, m = 1), dev box:
// 2 threads 67-81 → 48-50 ms, one thread 137 → 94 ms; a plain read of the same bytes with
// the same prefetch takes 41-44 / 70 ms. Distances of 1, 4, 8-32 and 64 KB gave 57-61,
// 52-54, 48-51 and 50-53 ms on 2 threads.
constexpr int64_t prefetch_ahead = 16384;

// Prefetches the bytes that lie prefetch_ahead past row r's, up to the end of the thread's
// rows [.., r_end): called once per row on the first pass over a tile.
inline void prefetch_row_ahead(const WeightMatrix& w, int64_t r, int64_t r_end) {
  const int64_t stop = std::min<int64_t>(int64_t(w.row_bytes()) + prefetch_ahead,
                                         int64_t(w.row_bytes()) * (r_end - r));
  for (int64_t off = prefetch_ahead; off < stop; off += 64) _mm_prefetch(w.row(r) + off, _MM_HINT_T0);
}

// The kernels of a block format on its activation format Act (ActQ8Block or ActQ8KBlock).
template <class Act>
struct QKernels {
  void (*quantize)(const float* x, Act* out, int64_t k);
  QDotOf<Act> dot;
  QDot4Of<Act> dot4;  // nullptr: one row at a time
};

QKernels<ActQ8Block> q8_kernels(GgmlType t, bool avx2) {
  if (avx2) return {quantize_act_avx2, qdot_avx2_kernel(t), qdot4_avx2_kernel(t)};
  return {quantize_act_ref, qdot_ref_kernel(t), nullptr};
}

QKernels<ActQ8KBlock> q8_k_kernels(GgmlType t, bool avx2) {
  if (avx2) return {quantize_act_k_avx2, qdot_k_avx2_kernel(t), qdot4_k_avx2_kernel(t)};
  return {quantize_act_k_ref, qdot_k_ref_kernel(t), nullptr};
}

// Quantized activation rows for the block formats, one buffer per activation format:
// reused per calling thread, so a decode step allocates nothing after the first.
thread_local std::vector<ActQ8Block> act_scratch;
thread_local std::vector<ActQ8KBlock> act_k_scratch;
// The f32 panel of (b), likewise kept (it grows to at most panel_floats).
thread_local std::vector<float> panel_scratch;

template <class Act>
void rows_qdot(const WeightMatrix& w, const QKernels<Act>& kern, std::vector<Act>& scratch, const float* x,
               const float* bias, float* y, int64_t m) {
  const int64_t n = w.rows(), k = w.cols();
  const int64_t kb = k / act_block_elements<Act>;  // activation blocks per row
  if (scratch.size() < size_t(m * kb)) scratch.resize(size_t(m * kb));
  Act* xq = scratch.data();
  // Each row quantized once; threaded only when there is enough of it to pay for a wake-up.
  const auto quantize_rows = [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) kern.quantize(x + i * k, xq + i * kb, k);
  };
  if (m * k >= (int64_t(1) << 16)) {
    default_pool().parallel_for(m, 4, quantize_rows);
  } else {
    quantize_rows(0, m);
  }
  // Four x rows per unpacking of a weight block where the format has that kernel: the same
  // sums as dot() row by row, so a row's result does not depend on m or on its neighbours.
  const int64_t tile = weight_tile(w);
  default_pool().parallel_for(n, row_grain, [&](int64_t n0, int64_t n1) {
    for (int64_t t0 = n0; t0 < n1; t0 += tile) {
      const int64_t t1 = std::min(n1, t0 + tile);
      int64_t i = 0;
      if (kern.dot4)
        for (; i + 4 <= m; i += 4)
          for (int64_t r = t0; r < t1; ++r) {
            if (i == 0) prefetch_row_ahead(w, r, n1);
            float out[4];
            kern.dot4(w.row(r), xq + i * kb, kb, k, out);
            const float b = bias ? bias[r] : 0.0f;
            for (int j = 0; j < 4; ++j) y[(i + j) * n + r] = out[j] + b;
          }
      for (; i < m; ++i) {
        const Act* xi = xq + i * kb;
        for (int64_t r = t0; r < t1; ++r) {
          if (i == 0) prefetch_row_ahead(w, r, n1);
          y[i * n + r] = kern.dot(w.row(r), xi, k) + (bias ? bias[r] : 0.0f);
        }
      }
    }
  });
}

void rows_qdot(const WeightMatrix& w, const float* x, const float* bias, float* y, int64_t m) {
  const bool avx2 = use_avx2();
  switch (qdot_act_format(w.type())) {
    case ActFormat::q8: return rows_qdot(w, q8_kernels(w.type(), avx2), act_scratch, x, bias, y, m);
    case ActFormat::q8_k: return rows_qdot(w, q8_k_kernels(w.type(), avx2), act_k_scratch, x, bias, y, m);
    case ActFormat::none: break;
  }
  fail("linear: no row kernels for {}", ggml_type_name(w.type()));
}

void rows_fdot(const WeightMatrix& w, const float* x, const float* bias, float* y, int64_t m) {
  const int64_t n = w.rows(), k = w.cols();
  const bool avx2 = use_avx2();
  const FDotFn dot = avx2 ? fdot_avx2_kernel(w.type()) : fdot_ref_kernel(w.type());
  const FDot2Fn dot2 = avx2 ? fdot2_avx2_kernel(w.type()) : fdot2_ref_kernel(w.type());
  const int64_t tile = weight_tile(w);
  default_pool().parallel_for(n, row_grain, [&](int64_t n0, int64_t n1) {
    for (int64_t t0 = n0; t0 < n1; t0 += tile) {
      const int64_t t1 = std::min(n1, t0 + tile);
      int64_t i = 0;
      for (; i + 2 <= m; i += 2) {  // two x rows per widening of the weights; same sums as dot()
        const float* x0 = x + i * k;
        for (int64_t r = t0; r < t1; ++r) {
          if (i == 0) prefetch_row_ahead(w, r, n1);
          float out[2];
          dot2(w.row(r), x0, x0 + k, k, out);
          const float b = bias ? bias[r] : 0.0f;
          y[i * n + r] = out[0] + b;
          y[(i + 1) * n + r] = out[1] + b;
        }
      }
      if (i < m)
        for (int64_t r = t0; r < t1; ++r) {
          if (i == 0) prefetch_row_ahead(w, r, n1);
          y[i * n + r] = dot(w.row(r), x + i * k, k) + (bias ? bias[r] : 0.0f);
        }
    }
  });
}

// Whether OpenBLAS runs AVX2-class (or wider) sgemm kernels. A DYNAMIC_ARCH OpenBLAS that
// does not know the CPU falls back to its SSE3 "Prescott" kernels (0.3.21 on the dev box's
// Xeon does): 31 GFLOP/s a core at m = 512 against 70-82 for "Haswell". Then (b) loses
// to (a) on every shape of the table above at m = 48, 64 and 512 (time ratio 1.08-2.26),
// except F16 at k = 8960 and m = 512 (0.76), so linear() keeps (a) throughout.
bool blas_sgemm_is_fast() {
  static const bool fast = [] {
    const char* name = openblas_get_corename();
    std::string core = name ? name : "";
    for (char& c : core) c = char(std::tolower(static_cast<unsigned char>(c)));
    for (const char* known : {"haswell", "zen", "skylakex", "cooperlake", "sapphirerapids"})
      if (core.rfind(known, 0) == 0) return true;
    return false;
  }();
  return fast;
}

}  // namespace

void linear_rows(const WeightMatrix& w, const float* x, const float* bias, float* y, int64_t m) {
  check_args(w, x, y, m);
  if (m == 0 || w.rows() == 0) return;
  if (w.cols() == 0) return fill_bias(bias, y, m, w.rows());
  switch (w.type()) {
    case GgmlType::f32: return matmul_decode(x, w.f32(), bias, y, m, w.cols(), w.rows());
    case GgmlType::f16:
    case GgmlType::bf16: return rows_fdot(w, x, bias, y, m);
    default: return rows_qdot(w, x, bias, y, m);
  }
}

void linear_panels(const WeightMatrix& w, const float* x, const float* bias, float* y, int64_t m,
                   int64_t panel_rows) {
  check_args(w, x, y, m);
  const int64_t n = w.rows(), k = w.cols();
  if (m == 0 || n == 0) return;
  if (k == 0) return fill_bias(bias, y, m, n);
  if (panel_rows <= 0) panel_rows = std::max<int64_t>(1, panel_floats / k);
  panel_rows = std::min(panel_rows, n);
  if (panel_scratch.size() < size_t(panel_rows * k)) panel_scratch.resize(size_t(panel_rows * k));
  float* panel = panel_scratch.data();
  for (int64_t p0 = 0; p0 < n; p0 += panel_rows) {
    const int64_t p1 = std::min(n, p0 + panel_rows);
    // Dequantized by the pool, then sgemm (threaded by OpenBLAS) from this thread: the two
    // thread teams never nest.
    default_pool().parallel_for(p1 - p0, 16, [&](int64_t r0, int64_t r1) {
      w.dequantize_rows(p0 + r0, p0 + r1, panel + r0 * k);
    });
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(m), int(p1 - p0), int(k), 1.0f, x, int(k), panel,
                int(k), 0.0f, y + p0, int(n));
  }
  if (bias)
    default_pool().parallel_for(m, 8, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i)
        for (int64_t j = 0; j < n; ++j) y[i * n + j] += bias[j];
    });
}

bool linear_prefers_panels(GgmlType t, int64_t m, int64_t k, int64_t n) {
  if (t == GgmlType::f32) return false;
  return m >= panel_min_m && blas_sgemm_is_fast();
}

void linear(const WeightMatrix& w, const float* x, const float* bias, float* y, int64_t m) {
  if (w.type() == GgmlType::f32) {
    check_args(w, x, y, m);
    if (m == 0 || w.rows() == 0) return;
    if (w.cols() == 0) return fill_bias(bias, y, m, w.rows());
    return matmul(x, w.f32(), bias, y, m, w.cols(), w.rows());
  }
  // The row kernels for every m: each output row then depends on its own x row only, so a
  // prompt's logits do not depend on how it is chunked or batched (the server's concurrent
  // requests equal sequential ones). The panel path is up to ~2x faster at m = 512 where
  // OpenBLAS runs AVX2 kernels (see linear_prefers_panels), but sgemm blocks its sums by the
  // shape; a tiled integer kernel with a fixed summation order would give both.
  linear_rows(w, x, bias, y, m);
}

void linear_decode(const WeightMatrix& w, const float* x, const float* bias, float* y, int64_t m) {
  linear_rows(w, x, bias, y, m);
}

void linear_ref(const WeightMatrix& w, const float* x, const float* bias, float* y, int64_t m) {
  const int64_t n = w.rows(), k = w.cols();
  std::vector<float> wr(static_cast<size_t>(k));
  for (int64_t r = 0; r < n; ++r) {
    w.dequantize_rows(r, r + 1, wr.data());
    for (int64_t i = 0; i < m; ++i) {
      double acc = bias ? bias[r] : 0.0;
      for (int64_t p = 0; p < k; ++p) acc += double(x[i * k + p]) * double(wr[size_t(p)]);
      y[i * n + r] = float(acc);
    }
  }
}

}  // namespace oscar::qmat
