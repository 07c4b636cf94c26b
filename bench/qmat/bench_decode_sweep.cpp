// One decode step's weight traffic: linear_decode (m = 1) over every projection of a
// Qwen2.5-1.5B-shaped model of random Q4_K / Q6_K rows (28 layers as in its Q4_K_M file, plus
// the Q6_K output matrix; about 980 MB, far past any cache), against a plain read of
// the same bytes on the same threads, prefetched the same distance ahead (on the dev box's
// VM the hardware prefetcher alone reads at about 18 GB/s on 2 threads, 23 with it).
// Wall time per sweep, best of the repetitions:
//   bench_decode_sweep [threads = 2] [repetitions = 5]
// The ratio read/decode is the fraction of the read bandwidth the row kernels reach.
#include <xmmintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "oscar/core/thread_pool.h"
#include "oscar/formats/ggml_type.h"
#include "oscar/qmat/weight_matrix.h"

namespace {

using oscar::GgmlType;

double seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Shape {
  GgmlType type;
  int64_t n, k;
};

std::vector<Shape> qwen25_q4_k_m_shapes() {
  std::vector<Shape> s;
  for (int layer = 0; layer < 28; ++layer) {
    const GgmlType mixed = layer % 2 ? GgmlType::q6_k : GgmlType::q4_k;  // attn_v, ffn_down
    s.push_back({GgmlType::q4_k, 1536, 1536});                          // attn_q
    s.push_back({GgmlType::q4_k, 256, 1536});                           // attn_k
    s.push_back({mixed, 256, 1536});                                    // attn_v
    s.push_back({GgmlType::q4_k, 1536, 1536});                          // attn_output
    s.push_back({GgmlType::q4_k, 8960, 1536});                          // ffn_gate
    s.push_back({GgmlType::q4_k, 8960, 1536});                          // ffn_up
    s.push_back({mixed, 1536, 8960});                                   // ffn_down
  }
  s.push_back({GgmlType::q6_k, 151936, 1536});  // output
  return s;
}

// Random bytes with the fp16 scale fields' exponent bits kept below infinity (mask 0x7bff).
void fill_random(std::vector<uint8_t>& bytes, uint64_t& state) {
  for (size_t i = 0; i + 8 <= bytes.size(); i += 8) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    const uint64_t v = state & 0x7bff7bff7bff7bffull;
    std::copy_n(reinterpret_cast<const uint8_t*>(&v), 8, bytes.data() + i);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 5;
  oscar::set_num_threads(threads);
  std::vector<std::vector<uint8_t>> store;
  std::vector<oscar::qmat::WeightMatrix> weights;
  uint64_t total = 0, state = 88172645463325252ull;
  for (const Shape& s : qwen25_q4_k_m_shapes()) {
    store.emplace_back(size_t(oscar::ggml_row_bytes(s.type, s.k) * uint64_t(s.n)));
    fill_random(store.back(), state);
    total += store.back().size();
    weights.push_back(oscar::qmat::WeightMatrix::view(s.type, store.back().data(), s.n, s.k, nullptr));
  }
  std::vector<float> x(8960), y(151936);
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(i % 17) * 0.1f - 0.8f;
  double best_decode = 1e30, best_read = 1e30;
  std::atomic<long long> sink{0};
  for (int r = 0; r < reps; ++r) {
    const double t0 = seconds();
    for (const auto& w : weights) oscar::qmat::linear_decode(w, x.data(), nullptr, y.data(), 1);
    const double t1 = seconds();
    oscar::default_pool().parallel_for(int64_t(store.size()), 1, [&](int64_t a, int64_t b) {
      uint64_t acc[8] = {};  // eight independent sums of 8-byte words (vectorized by the compiler)
      for (int64_t i = a; i < b; ++i) {
        const uint64_t* p = reinterpret_cast<const uint64_t*>(store[i].data());
        for (size_t j = 0; j + 8 <= store[i].size() / 8; j += 8) {
          _mm_prefetch(reinterpret_cast<const char*>(p + j) + 16384, _MM_HINT_T0);  // as linear.cpp does
          for (int l = 0; l < 8; ++l) acc[l] += p[j + l];
        }
      }
      for (uint64_t v : acc) sink += (long long)v;
    });
    const double t2 = seconds();
    best_decode = std::min(best_decode, t1 - t0);
    best_read = std::min(best_read, t2 - t1);
  }
  std::printf(
      "{\"threads\": %d, \"bytes\": %llu, \"decode_ms\": %.1f, \"read_ms\": %.1f, \"decode_gb_s\": %.1f, "
      "\"read_gb_s\": %.1f, \"fraction_of_read\": %.2f, \"y0\": %g}\n",
      threads, static_cast<unsigned long long>(total), best_decode * 1e3, best_read * 1e3, total / best_decode * 1e-9,
      total / best_read * 1e-9, best_read / best_decode, double(y[0]) + double(sink.load() & 1));
}
