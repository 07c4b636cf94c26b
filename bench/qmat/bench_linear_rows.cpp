// Single-thread timing of linear_rows (the row kernels behind linear() and linear_decode())
// on random K-quant weights at the Qwen2.5-1.5B projection shapes: process CPU time, best
// of 3 trials, printed as µs per call and GFLOP/s (2·m·n·k per call).
//   bench_linear_rows [min_seconds_per_trial = 0.3]
#include <time.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "oscar/core/dtype.h"
#include "oscar/core/thread_pool.h"
#include "oscar/formats/ggml_type.h"
#include "oscar/qmat/linear_paths.h"
#include "oscar/qmat/weight_matrix.h"

namespace {

using oscar::GgmlType;

double cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

void put_half(uint8_t* p, float v) {
  const uint16_t bits = oscar::f32_to_fp16(v).bits;
  std::memcpy(p, &bits, 2);
}

// Random bytes (every quant, scale and min pattern) with fp16 d / dmin in [0, 0.01].
std::vector<uint8_t> random_weights(GgmlType t, int64_t rows, int64_t cols, uint64_t seed) {
  std::vector<uint8_t> bytes(size_t(oscar::ggml_row_bytes(t, cols) * uint64_t(rows)));
  std::mt19937_64 rng(seed);
  for (uint8_t& c : bytes) c = uint8_t(rng());
  std::uniform_real_distribution<float> scale(0.0f, 0.01f);
  const int64_t bb = oscar::ggml_block_bytes(t), nb = rows * cols / oscar::ggml_block_elements(t);
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t* p = bytes.data() + b * bb;
    if (t == GgmlType::q6_k) {
      put_half(p + 208, scale(rng));
    } else {
      put_half(p, scale(rng));
      put_half(p + 2, scale(rng));
    }
  }
  return bytes;
}

}  // namespace

int main(int argc, char** argv) {
  const double min_seconds = argc > 1 ? std::atof(argv[1]) : 0.3;
  oscar::set_num_threads(1);
  struct Shape {
    int64_t k, n;
  };
  const Shape shapes[] = {{1536, 1536}, {1536, 256}, {1536, 8960}, {8960, 1536}};
  std::printf("%-5s %6s %6s %4s %12s %9s\n", "type", "k", "n", "m", "us/call", "GFLOP/s");
  for (GgmlType t : {GgmlType::q4_k, GgmlType::q6_k}) {
    for (const Shape& s : shapes) {
      const auto bytes = random_weights(t, s.n, s.k, 7);
      const auto w = oscar::qmat::WeightMatrix::view(t, bytes.data(), s.n, s.k, nullptr);
      for (int64_t m : {1, 64}) {
        std::vector<float> x(size_t(m * s.k)), y(size_t(m * s.n));
        std::mt19937_64 rng(11);
        std::normal_distribution<float> normal(0.0f, 1.0f);
        for (float& v : x) v = normal(rng);
        double best = 1e30;
        for (int trial = 0; trial < 3; ++trial) {
          int64_t calls = 0;
          const double t0 = cpu_seconds();
          double t1 = t0;
          while (t1 - t0 < min_seconds) {
            oscar::qmat::linear_rows(w, x.data(), nullptr, y.data(), m);
            ++calls;
            t1 = cpu_seconds();
          }
          best = std::min(best, (t1 - t0) / double(calls));
        }
        const double gflops = 2.0 * double(m) * double(s.n) * double(s.k) / best * 1e-9;
        std::printf("%-5s %6lld %6lld %4lld %12.1f %9.1f\n", oscar::ggml_type_name(t), (long long)s.k,
                    (long long)s.n, (long long)m, best * 1e6, gflops);
      }
    }
  }
  return 0;
}
