// One layer of decode attention over a random mixed cache (BF16 sink ‖ history ‖ BF16
// recent), CPU time per call, median of the repetitions: the per-step attention cost at a
// context depth, for a model shape, with or without the split-off key bias (KeyBias).
//   bench_attention_decode KV N_HEADS N_KV_HEADS HEAD_DIM N_TOKENS THREADS [REPS] [KEY_BIAS 0|1]
// KV: bf16 | int8 | int4 | int2. Prints one JSON object per run.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <random>
#include <string>
#include <vector>

#include "oscar/attention/attention.h"
#include "oscar/core/thread_pool.h"
#include "oscar/kv/history_formats.h"

using namespace oscar;

namespace {

double cpu_us() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) * 1e6 + double(t.tv_nsec) * 1e-3;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 7) {
    std::fprintf(stderr, "usage: %s KV N_HEADS N_KV_HEADS HEAD_DIM N_TOKENS THREADS [REPS] [KEY_BIAS]\n", argv[0]);
    return 2;
  }
  const std::string kv = argv[1];
  const int n_heads = std::atoi(argv[2]), n_kv = std::atoi(argv[3]), d = std::atoi(argv[4]);
  const int64_t n = std::atoll(argv[5]);
  const int threads = std::atoi(argv[6]);
  const int reps = argc > 7 ? std::atoi(argv[7]) : 30;
  const bool with_bias = argc > 8 && std::atoi(argv[8]) != 0;
  set_num_threads(threads);
  KvSpec spec = KvSpec::parse(kv);
  spec.sink = 64;
  spec.recent = 256;
  spec.block_tokens = 16;
  spec.group = d;
  spec.k_clip = spec.v_clip = 0.0f;
  const KvShape shape{1, n_kv, d};
  auto [kf, vf] = make_history_formats(spec, shape, nullptr);
  KvCache cache(shape, spec, n + 64, kf, vf);
  const SeqId seq = cache.add_sequence();
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  std::vector<float> k(size_t(n * n_kv * d)), v(k.size()), q(size_t(n_heads * d)), out(q.size());
  for (float& x : k) x = normal(rng);
  for (float& x : v) x = normal(rng);
  for (float& x : q) x = normal(rng);
  std::vector<float> bias(size_t(n_kv * d));
  for (float& x : bias) x = 5.0f * normal(rng);
  RopeFreqs rope;
  for (int i = 0; i < d / 2; ++i) rope.inv_freq.push_back(std::pow(1.0e6, -2.0 * i / d));
  const KeyBias key_bias(rope, n_kv, d, bias.data(), nullptr);
  if (!cache.reserve(seq, n)) return 1;
  cache.write(0, seq, 0, n, k.data(), v.data());
  cache.demote(0, seq, n);
  cache.commit(seq, n);
  const AttentionShape s{n_heads, n_kv, d};
  const KvSeqView view = cache.view(0, seq, n);
  const KeyBias* kb = with_bias ? &key_bias : nullptr;
  for (int i = 0; i < 3; ++i) attention_decode(s, view, q.data(), out.data(), kb);
  std::vector<double> cpu;
  for (int r = 0; r < reps; ++r) {
    const double c0 = cpu_us();
    attention_decode(s, view, q.data(), out.data(), kb);
    cpu.push_back(cpu_us() - c0);
  }
  std::sort(cpu.begin(), cpu.end());
  std::printf(
      "{\"kv\": \"%s\", \"n_heads\": %d, \"n_kv_heads\": %d, \"head_dim\": %d, \"n_tokens\": %lld, \"threads\": %d, "
      "\"key_bias\": %s, \"cpu_us_per_layer\": %.1f}\n",
      kv.c_str(), n_heads, n_kv, d, static_cast<long long>(n), threads, with_bias ? "true" : "false",
      cpu[cpu.size() / 2]);
}
