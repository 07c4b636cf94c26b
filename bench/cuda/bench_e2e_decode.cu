// End-to-end decode of oscar::cuda::DeviceModel at the Qwen3-8B shape (36 layers, E 4096,
// 32 q heads, 8 KV heads, d 128, F 12288, V 151936, QK-norm, NeoX RoPE) with random BF16
// weights, over a BF16 cache and an INT2 (OSCAR) cache filled by synthetic::fill_sequence (synthetic_cache.cuh):
//   latency    B = 1 at each T of --t: median ms per step(), tokens/s = 1000 / ms;
//   throughput at T = --tput-t under one KV memory budget: as many sequences as the budget
//              holds for each format (at most --max-batch), median ms per batched step,
//              tokens/s = B · 1000 / ms.
// Steps are CUDA-graph replays (use_graph = true), timed between two events on the model's
// stream with the stream idle before each (so host work inside step() is counted), after
// --warmup untimed steps; each step appends one token to every sequence. bytes = what a
// step must move (weights that are read + every sequence's KV bytes); roofline_ms =
// bytes / the device-to-device copy bandwidth measured in the same process (read + write
// bytes / time, as bench_decode_attention); frac_of_copy = roofline_ms / ms.
//   bench_e2e_decode [--json PATH] [--commit SHA] [--steps N] [--warmup N] [--t LIST]
//                    [--kv LIST] [--only-latency | --only-throughput] [--budget-gib X]
//                    [--max-batch N] [--tput-t T] [--prefill-t LIST] [--prefill-chunk N] [--seed S]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <exception>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "random_weights.cuh"

#include <cuda_runtime.h>

#include "oscar/cuda/check_cuda.h"
#include "oscar/engine/cuda/device_kv_cache.h"
#include "oscar/engine/cuda/device_model.h"
#include "bench_util.cuh"
#include "synthetic_cache.cuh"

namespace {

using oscar::cuda::DeviceKvCache;
using oscar::cuda::DeviceModel;
using oscar::cuda::KvCacheLimits;
using oscar::KvFormat;
using oscar::ModelDims;
using oscar::RopeFreqs;
using oscar::RopeStyle;

constexpr int kSink = 64, kWindow = 256, kGroup = 128, kPage = 16;
constexpr float kClip = 0.97f;
// Device memory kept free beyond weights and KV pages: activations (logits [B, V] f32),
// cuBLAS workspaces, attention partials, graphs.
constexpr size_t kSlackBytes = size_t(3) << 30;

ModelDims qwen3_8b() {
  ModelDims s;
  s.n_layers = 36;
  s.n_embd = 4096;
  s.n_ff = 12288;
  s.n_heads = 32;
  s.n_kv_heads = 8;
  s.head_dim = 128;
  s.n_vocab = 151936;
  s.rms_eps = 1e-6f;
  s.qkv_bias = false;
  s.qk_norm = true;
  s.tied_embeddings = false;
  return s;
}

// NeoX pairs, theta 1e6, no scaling.
RopeFreqs qwen3_rope(const ModelDims& s) {
  RopeFreqs r;
  r.style = RopeStyle::neox;
  r.inv_freq.resize(size_t(s.head_dim / 2));
  for (int i = 0; i < s.head_dim / 2; ++i) r.inv_freq[size_t(i)] = std::pow(1e6, -2.0 * i / s.head_dim);
  return r;
}

// A random orthogonal d×d matrix, row-major f32: Gram–Schmidt (modified, two passes, in
// double) over the rows of a Gaussian matrix. Returns max |R·Rᵀ − I| of the f32 result in *err.
std::vector<float> random_orthogonal(int d, std::mt19937_64& rng, double* err) {
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<double> a(size_t(d) * d);
  for (double& x : a) x = normal(rng);
  for (int i = 0; i < d; ++i) {
    double* ri = &a[size_t(i) * d];
    for (int pass = 0; pass < 2; ++pass)
      for (int j = 0; j < i; ++j) {
        const double* rj = &a[size_t(j) * d];
        double dot = 0;
        for (int k = 0; k < d; ++k) dot += ri[k] * rj[k];
        for (int k = 0; k < d; ++k) ri[k] -= dot * rj[k];
      }
    double norm = 0;
    for (int k = 0; k < d; ++k) norm += ri[k] * ri[k];
    norm = std::sqrt(norm);
    for (int k = 0; k < d; ++k) ri[k] /= norm;
  }
  std::vector<float> r(a.begin(), a.end());
  double e = 0;
  for (int i = 0; i < d; ++i)
    for (int j = 0; j < d; ++j) {
      double dot = 0;
      for (int k = 0; k < d; ++k) dot += double(r[size_t(i) * d + k]) * r[size_t(j) * d + k];
      e = std::max(e, std::abs(dot - (i == j ? 1.0 : 0.0)));
    }
  *err = std::max(*err, e);
  return r;
}

struct KvSpec {
  std::string name;
  int bits = 0;  // 0: BF16 only
};

// The format of `spec` for every layer: BF16 (bits 0, no clip, no rotation) or OSCAR (bits b,
// G 128, sink 64, recent 256, clip 0.97 on K and V, R_K a random orthogonal matrix per layer,
// R_V none: absorbed into W_v / W_o, which random weights make moot).
KvFormat make_format(const KvSpec& spec, const ModelDims& s, uint64_t seed, double* rot_err) {
  KvFormat f;
  f.sink = kSink;
  f.window = kWindow;
  f.group = kGroup;
  const size_t L = size_t(s.n_layers);
  f.set_bits(std::vector<int>(size_t(L), spec.bits));
  f.k_clip.assign(L, spec.bits ? kClip : 0.f);
  f.v_clip.assign(L, spec.bits ? kClip : 0.f);
  f.rot_k.assign(L, {});
  f.rot_v.assign(L, {});
  if (spec.bits) {
    std::mt19937_64 rng(seed ^ 0x5eedf00dULL);
    for (size_t l = 0; l < L; ++l) f.rot_k[l] = random_orthogonal(s.head_dim, rng, rot_err);
  }
  return f;
}

struct Row {
  std::string kind;  // "latency" | "throughput" | "prefill"
  std::string kv;
  int batch = 0;
  int64_t seq = 0;   // tokens in each sequence's cache before the first step
  int steps = 0;
  double ms = 0, wall_ms = 0, tokens_per_s = 0, bytes = 0, roofline_ms = 0, frac = 0;
  size_t kv_bytes_per_seq = 0, kv_bf16_bytes_per_seq = 0, kv_bytes_reserved = 0, weight_bytes = 0, weight_bytes_read = 0;
  double swap_out_ms = 0, swap_in_ms = 0;  // prefill rows: DeviceKvCache::swap_out / swap_in of the prompt, measured
  double swap_pin_ms = 0;                  // cudaMallocHost + cudaFreeHost of the image's pinned memory
  std::string note;
  bool measured = false, error = false;
};

struct Options {
  std::vector<int64_t> lat_t = {8192, 32768, 131072};
  std::vector<int64_t> prefill_t = {4096};  // prompt lengths for "prefill" rows (empty: none)
  int64_t tput_t = 32768;
  std::vector<KvSpec> kvs = {{"bf16", 0}, {"int2-oscar", 2}};
  int steps = 32, warmup = 4, max_batch = 128;
  int prefill_chunk = oscar::cuda::KvCacheLimits{}.prefill_chunk;  // tokens per prefill launch
  double budget_gib = 40.0;
  bool latency = true, throughput = true;
  uint64_t seed = 1234;
};

bool is_oom(const std::exception& e) { return std::strncmp(e.what(), "out of GPU memory", 17) == 0; }

// Bytes of KV pages one sequence of length `len` holds, by the cache's own accounting: a
// cache with one slot, sized for `len` (freed on return).
size_t probe_bytes_for_length(const ModelDims& s, const KvFormat& f, int64_t len, size_t* bf16_bytes) {
  KvCacheLimits lim;
  lim.max_seqs = 1;
  lim.max_seq_len = len;
  DeviceKvCache probe(s.n_layers, s.n_kv_heads, s.head_dim, f, lim);
  if (bf16_bytes) *bf16_bytes = probe.bf16_bytes_for_length(len);
  return probe.bytes_for_length(len);
}

// One configuration: a model with `batch` slots (0: as many as the KV budget holds) whose
// sequences start at length `seq`; warm-up, then `steps` timed steps of all slots.
Row run_config(const std::string& kind, const KvSpec& spec, int batch, int64_t seq, const Options& o,
               const ModelDims& shape, double copy, double* rot_err) {
  Row row;
  row.kind = kind;
  row.kv = spec.name;
  row.seq = seq;
  row.steps = o.steps;
  const KvFormat fmt = make_format(spec, shape, o.seed, rot_err);
  // The length every sequence reaches, plus one page of margin; the cache is sized for it.
  const int64_t max_len = seq + o.warmup + o.steps + kPage;
  try {
    const size_t per_seq_max = probe_bytes_for_length(shape, fmt, max_len, nullptr);
    if (batch == 0) {
      const double budget = o.budget_gib * double(size_t(1) << 30);
      batch = int(std::min<double>(o.max_batch, std::floor(budget / double(per_seq_max))));
      if (batch < 1) {
        row.note = "skipped: the KV budget holds no sequence";
        return row;
      }
    }
    row.batch = batch;
    const size_t weight_est = 2 * shape.n_params();
    const size_t need = weight_est + size_t(batch) * per_seq_max + kSlackBytes;
    size_t free_b = 0, total_b = 0;
    CHECK_CUDA(cudaMemGetInfo(&free_b, &total_b));
    if (free_b < need) {
      char buf[256];
      std::snprintf(buf, sizeof buf, "skipped: needs ~%.1f GiB (weights %.1f + KV %d x %.2f + slack %.1f), %.1f GiB free",
                    double(need) / (1 << 30), double(weight_est) / (1 << 30), batch,
                    double(per_seq_max) / (1 << 30), double(kSlackBytes) / (1 << 30), double(free_b) / (1 << 30));
      row.note = buf;
      return row;
    }

    KvCacheLimits limits;
    limits.max_seqs = batch;
    limits.max_seq_len = max_len;  // fp_pages / hist_pages 0: sized for batch sequences of max_len
    limits.prefill_chunk = o.prefill_chunk;
    auto model = std::make_unique<DeviceModel>(shape, qwen3_rope(shape), fmt, limits, oscar::cuda::RandomWeightLoader(o.seed));
    DeviceKvCache& cache = model->cache();
    const cudaStream_t stream = model->stream();

    if (kind == "prefill") {  // a prompt of `seq` tokens into an empty cache, B = 1
      std::mt19937 prng(uint32_t(o.seed) + uint32_t(seq));
      std::uniform_int_distribution<int32_t> tok(0, shape.n_vocab - 1);
      std::vector<int32_t> prompt(static_cast<size_t>(seq));
      for (int32_t& t : prompt) t = tok(prng);
      cudaEvent_t p0, p1;
      CHECK_CUDA(cudaEventCreate(&p0));
      CHECK_CUDA(cudaEventCreate(&p1));
      std::vector<float> times;
      for (int r = 0; r < 3; ++r) {  // the first is a warm-up
        int slot = cache.add_sequence();
        CHECK_CUDA(cudaEventRecord(p0, stream));
        model->prefill(slot, prompt);
        CHECK_CUDA(cudaEventRecord(p1, stream));
        CHECK_CUDA(cudaEventSynchronize(p1));
        float t = 0.f;
        CHECK_CUDA(cudaEventElapsedTime(&t, p0, p1));
        if (r > 0) times.push_back(t);
        if (r == 2) {  // the swap space's round trip of the prompt's pages (pinned host memory)
          const size_t bytes = cache.swap_bytes(slot);
          void* host = nullptr;
          const auto a0 = std::chrono::steady_clock::now();
          CHECK_CUDA(cudaMallocHost(&host, std::max<size_t>(bytes, 1)));  // what PinnedPool pays once a buffer
          const auto w0 = std::chrono::steady_clock::now();
          row.swap_pin_ms = std::chrono::duration<double, std::milli>(w0 - a0).count();
          const DeviceKvCache::SwapTable table = cache.swap_out(slot, static_cast<uint8_t*>(host));  // removes slot
          const auto w1 = std::chrono::steady_clock::now();
          slot = cache.add_sequence();  // swap_out removed it; the image comes back in a new one
          if (!cache.swap_in(slot, table, static_cast<uint8_t*>(host))) throw std::runtime_error("swap_in refused");
          const auto w2 = std::chrono::steady_clock::now();
          CHECK_CUDA(cudaFreeHost(host));
          row.swap_pin_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - w2).count();
          if (cache.length(slot) != seq) throw std::runtime_error("swap_in restored another length");
          row.swap_out_ms = std::chrono::duration<double, std::milli>(w1 - w0).count();
          row.swap_in_ms = std::chrono::duration<double, std::milli>(w2 - w1).count();
        }
        cache.remove_sequence(slot);
      }
      CHECK_CUDA(cudaEventDestroy(p0));
      CHECK_CUDA(cudaEventDestroy(p1));
      row.batch = 1;
      row.steps = 2;
      row.ms = median(times);
      row.wall_ms = row.ms;
      row.tokens_per_s = double(seq) * 1000.0 / row.ms;
      row.kv_bytes_per_seq = cache.bytes_for_length(seq);
      row.kv_bf16_bytes_per_seq = cache.bf16_bytes_for_length(seq);
      row.weight_bytes = model->weight_bytes();
      row.note = "prompt of T tokens into an empty cache, launches of " + std::to_string(o.prefill_chunk) +
                 " tokens; compute-bound: no roofline";
      row.measured = true;
      return row;
    }
    std::vector<int> slots(static_cast<size_t>(batch));
    for (int b = 0; b < batch; ++b) {
      slots[size_t(b)] = cache.add_sequence();
      synthetic::fill_sequence(cache, slots[size_t(b)], seq, o.seed * 7919 + uint64_t(b), stream);
    }
    CHECK_CUDA(cudaDeviceSynchronize());  // the fills on `stream`, the table copies on the legacy stream
    row.kv_bytes_per_seq = cache.bytes_for_length(seq);
    row.kv_bf16_bytes_per_seq = cache.bf16_bytes_for_length(seq);
    row.kv_bytes_reserved = cache.bytes_reserved();
    row.weight_bytes = model->weight_bytes();
    // The token-embedding table is not read by a step (only B rows of it) unless it is also
    // the output projection.
    const size_t embd_bytes = size_t(shape.n_vocab) * size_t(shape.n_embd) * 2;
    row.weight_bytes_read = shape.tied_embeddings || row.weight_bytes < embd_bytes
                                ? row.weight_bytes
                                : row.weight_bytes - embd_bytes + size_t(batch) * size_t(shape.n_embd) * 2;

    std::mt19937 rng(uint32_t(o.seed) + uint32_t(batch) * 31u + uint32_t(seq));
    std::uniform_int_distribution<int32_t> token(0, shape.n_vocab - 1);
    std::vector<int32_t> tokens(static_cast<size_t>(batch));
    cudaEvent_t e0, e1;
    CHECK_CUDA(cudaEventCreate(&e0));
    CHECK_CUDA(cudaEventCreate(&e1));
    std::vector<float> ms, wall;
    for (int i = 0; i < o.warmup + o.steps; ++i) {
      for (int32_t& t : tokens) t = token(rng);
      const auto w0 = std::chrono::steady_clock::now();
      CHECK_CUDA(cudaEventRecord(e0, stream));
      model->step(slots, tokens, /*use_graph=*/true);
      CHECK_CUDA(cudaEventRecord(e1, stream));
      CHECK_CUDA(cudaEventSynchronize(e1));
      const auto w1 = std::chrono::steady_clock::now();
      float t = 0.f;
      CHECK_CUDA(cudaEventElapsedTime(&t, e0, e1));
      if (i >= o.warmup) {
        ms.push_back(t);
        wall.push_back(std::chrono::duration<float, std::milli>(w1 - w0).count());
      }
    }
    CHECK_CUDA(cudaEventDestroy(e0));
    CHECK_CUDA(cudaEventDestroy(e1));
    CHECK_CUDA(cudaDeviceSynchronize());

    // Sanity: every sequence grew by one token a step, the outputs are finite and in range.
    for (int slot : slots)
      if (cache.length(slot) != seq + o.warmup + o.steps) {
        row.note = "length " + std::to_string(cache.length(slot)) + " after the steps, expected " +
                   std::to_string(seq + o.warmup + o.steps);
        row.error = true;
        break;
      }
    const std::vector<int32_t> ids = model->download_next_ids(batch);
    const std::vector<float> logits = model->download_logits(batch);
    for (int32_t id : ids)
      if (id < 0 || id >= shape.n_vocab) {
        row.note = "next id out of range";
        row.error = true;
        break;
      }
    for (float x : logits)
      if (!std::isfinite(x)) {
        row.note = "non-finite logits";
        row.error = true;
        break;
      }

    row.ms = median(ms);
    row.wall_ms = median(wall);
    row.tokens_per_s = batch * 1000.0 / row.ms;
    row.bytes = double(row.weight_bytes_read) + double(batch) * double(row.kv_bytes_per_seq);
    row.roofline_ms = copy > 0 ? row.bytes / (copy * 1e9) * 1e3 : 0.0;
    row.frac = row.roofline_ms / row.ms;
    row.measured = true;
  } catch (const std::exception& e) {
    (void)cudaGetLastError();
    if (is_oom(e)) {
      row.note = std::string("skipped: ") + e.what();
    } else {
      row.note = std::string("error: ") + e.what();
      row.error = true;
    }
    std::fprintf(stderr, "%s B=%d T=%lld %s: %s\n", kind.c_str(), row.batch, static_cast<long long>(seq),
                 spec.name.c_str(), row.note.c_str());
  }
  return row;
}

void print_header() {
  std::printf("%-10s %4s %7s %-11s %9s %9s %10s %9s %9s %6s %9s  %s\n", "kind", "B", "T", "kv", "ms", "wall_ms",
              "tokens/s", "GB/step", "roof_ms", "frac", "KV MB/seq", "note");
}

void print_row(const Row& r) {
  std::printf("%-10s %4d %7lld %-11s %9.3f %9.3f %10.1f %9.3f %9.3f %6.3f %9.1f  %s\n", r.kind.c_str(), r.batch,
              static_cast<long long>(r.seq), r.kv.c_str(), r.ms, r.wall_ms, r.tokens_per_s, r.bytes / 1e9,
              r.roofline_ms, r.frac, double(r.kv_bytes_per_seq) / 1e6, r.note.c_str());
  std::fflush(stdout);
}

struct Ratio {
  std::string kind, kv;
  int64_t seq = 0;
  double ratio = 0;
};

bool parse_list(const std::string& s, std::vector<int64_t>* out) {
  out->clear();
  size_t i = 0;
  while (i <= s.size()) {
    const size_t j = std::min(s.find(',', i), s.size());
    const std::string tok = s.substr(i, j - i);
    char* end = nullptr;
    const long long v = std::strtoll(tok.c_str(), &end, 10);
    if (tok.empty() || *end != '\0' || v < 1) return false;
    out->push_back(v);
    i = j + 1;
  }
  return !out->empty();
}

bool parse_kvs(const std::string& s, std::vector<KvSpec>* out) {
  out->clear();
  size_t i = 0;
  while (i <= s.size()) {
    const size_t j = std::min(s.find(',', i), s.size());
    const std::string tok = s.substr(i, j - i);
    if (tok == "bf16") out->push_back({tok, 0});
    else if (tok == "int2-oscar") out->push_back({tok, 2});
    else if (tok == "int4-oscar") out->push_back({tok, 4});
    else if (tok == "int8-oscar") out->push_back({tok, 8});
    else return false;
    i = j + 1;
  }
  return !out->empty();
}

void usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s [--json PATH] [--commit SHA] [--steps N>=5] [--warmup N>=1] [--t T1,T2,...]\n"
               "          [--kv bf16,int2-oscar,int4-oscar,int8-oscar] [--only-latency | --only-throughput]\n"
               "          [--budget-gib X] [--max-batch N] [--tput-t T] [--prefill-t T1,...|none] [--prefill-chunk N] [--seed S]\n"
               "defaults: --steps 32 --warmup 4 --t 8192,32768,131072 --kv bf16,int2-oscar --budget-gib 40\n"
               "          --max-batch 128 --tput-t 32768 --prefill-t 4096 (with the latency rows) --prefill-chunk 1024; commit from OSCAR_COMMIT when --commit is absent\n",
               argv0);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  std::string json_path, commit, command;
  for (int i = 0; i < argc; ++i) {
    if (i) command += ' ';
    command += argv[i];
  }
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has = i + 1 < argc;
    if (a == "--json" && has) json_path = argv[++i];
    else if (a == "--commit" && has) commit = argv[++i];
    else if (a == "--steps" && has) o.steps = std::max(5, std::atoi(argv[++i]));
    else if (a == "--warmup" && has) o.warmup = std::max(1, std::atoi(argv[++i]));
    else if (a == "--t" && has) {
      if (!parse_list(argv[++i], &o.lat_t)) { usage(argv[0]); return 2; }
    }
    else if (a == "--prefill-t" && has) {
      const std::string v = argv[++i];
      o.prefill_t.clear();
      if (v != "none" && !parse_list(v, &o.prefill_t)) { usage(argv[0]); return 2; }
    }
    else if (a == "--kv" && has) {
      if (!parse_kvs(argv[++i], &o.kvs)) { usage(argv[0]); return 2; }
    }
    else if (a == "--prefill-chunk" && has) o.prefill_chunk = std::max(1, std::atoi(argv[++i]));
    else if (a == "--only-latency") o.throughput = false;
    else if (a == "--only-throughput") o.latency = false;
    else if (a == "--budget-gib" && has) o.budget_gib = std::atof(argv[++i]);
    else if (a == "--max-batch" && has) o.max_batch = std::max(1, std::atoi(argv[++i]));
    else if (a == "--tput-t" && has) o.tput_t = std::max<int64_t>(1, std::atoll(argv[++i]));
    else if (a == "--seed" && has) o.seed = std::strtoull(argv[++i], nullptr, 10);
    else {
      usage(argv[0]);
      return 2;
    }
  }
  if (!o.latency && !o.throughput) {
    std::fprintf(stderr, "--only-latency and --only-throughput exclude each other\n");
    return 2;
  }
  if (!(o.budget_gib > 0)) {
    std::fprintf(stderr, "--budget-gib must be positive\n");
    return 2;
  }
  if (commit.empty()) commit = std::getenv("OSCAR_COMMIT") ? std::getenv("OSCAR_COMMIT") : "unknown";

  int n_dev = 0;
  if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) {
    std::fprintf(stderr, "no CUDA device\n");
    return 1;
  }
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  const ModelDims shape = qwen3_8b();  // (DeviceModel checks it)

  const double copy = copy_gbps(25);  // 1 GiB copies, median of 25 after 2 untimed (bench_util.cuh)
  // The host link, for what swapping a prefilled prompt's pages out and in would cost
  // beside recomputing it (the prefill rows).
  const double h2d = o.latency && !o.prefill_t.empty() ? host_link_gbps(true, 5) : 0.0;
  const double d2h = o.latency && !o.prefill_t.empty() ? host_link_gbps(false, 5) : 0.0;
  char date[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  size_t free_b = 0, total_b = 0;
  CHECK_CUDA(cudaMemGetInfo(&free_b, &total_b));
  std::printf("device %s, %d SMs, %.1f GiB (%.1f free); commit %s; %s\n", prop.name, prop.multiProcessorCount,
              double(total_b) / (1 << 30), double(free_b) / (1 << 30), commit.c_str(), date);
  std::printf("copy bandwidth (D2D 1 GiB, read+write bytes / time): %.1f GB/s\n", copy);
  if (h2d > 0) std::printf("host link (1 GiB pinned): host to device %.1f GB/s, device to host %.1f GB/s\n", h2d, d2h);
  std::printf("Qwen3-8B, random BF16 weights (%.2f B params); KV sink %d, recent %d, G %d, clip %.2f, R_K random "
              "orthogonal, R_V absorbed; graphs; median of %d steps after %d warm-up\n",
              double(shape.n_params()) / 1e9, kSink, kWindow, kGroup, kClip, o.steps, o.warmup);
  if (copy <= 0) std::printf("warning: copy bandwidth not measured (no 2 GiB free): roofline columns are 0\n");

  std::vector<Row> rows;
  double rot_err = 0;
  print_header();
  if (o.latency)
    for (int64_t t : o.lat_t)
      for (const KvSpec& kv : o.kvs) {
        rows.push_back(run_config("latency", kv, 1, t, o, shape, copy, &rot_err));
        print_row(rows.back());
      }
  if (o.latency)
    for (int64_t t : o.prefill_t)
      for (const KvSpec& kv : o.kvs) {
        rows.push_back(run_config("prefill", kv, 1, t, o, shape, copy, &rot_err));
        print_row(rows.back());
      }
  if (o.throughput)
    for (const KvSpec& kv : o.kvs) {
      rows.push_back(run_config("throughput", kv, 0, o.tput_t, o, shape, copy, &rot_err));
      print_row(rows.back());
    }
  if (rot_err > 0) std::printf("R_K: max |R·R^T - I| = %.2e (f32)\n", rot_err);
  // A preempted sequence's prompt: recomputed (the prefill row's time) or its KV bytes
  // swapped out and back in over the host link.
  auto swap_ms = [&](const Row& r) { return h2d > 0 && d2h > 0 ? double(r.kv_bytes_per_seq) * (1.0 / h2d + 1.0 / d2h) / 1e6 : 0.0; };
  for (const Row& r : rows)
    if (r.kind == "prefill" && r.measured && swap_ms(r) > 0)
      std::printf("prefill    T %7lld %-11s: recompute %.1f ms, swap out + in %.1f ms at the link's rate (%.1f MB): "
                  "%.1fx; measured (DeviceKvCache::swap_out %.1f + swap_in %.1f ms): %.1fx; pinning the image %.1f ms\n",
                  static_cast<long long>(r.seq), r.kv.c_str(), r.ms, swap_ms(r), double(r.kv_bytes_per_seq) / 1e6,
                  r.ms / swap_ms(r), r.swap_out_ms, r.swap_in_ms, r.ms / (r.swap_out_ms + r.swap_in_ms), r.swap_pin_ms);

  // Each non-BF16 format against BF16 at the same kind and T: tokens/s ratio.
  std::vector<Ratio> ratios;
  for (const Row& r : rows) {
    if (!r.measured || r.kv == "bf16") continue;
    for (const Row& b : rows)
      if (b.measured && b.kv == "bf16" && b.kind == r.kind && b.seq == r.seq)
        ratios.push_back({r.kind, r.kv, r.seq, r.tokens_per_s / b.tokens_per_s});
  }
  for (const Ratio& q : ratios)
    std::printf("%-10s T %7lld: %s / bf16 tokens/s = %.2fx\n", q.kind.c_str(), static_cast<long long>(q.seq),
                q.kv.c_str(), q.ratio);

  bool failed = false;
  for (const Row& r : rows) failed = failed || r.error;

  if (!json_path.empty()) {
    FILE* f = std::fopen(json_path.c_str(), "w");
    if (!f) {
      std::fprintf(stderr, "cannot write %s\n", json_path.c_str());
      return 1;
    }
    std::fprintf(f, "{\n  \"device\": \"%s\",\n  \"date\": \"%s\",\n  \"commit\": \"%s\",\n  \"command\": \"%s\",\n",
                 json_escape(prop.name).c_str(), date, json_escape(commit).c_str(), json_escape(command).c_str());
    std::fprintf(f, "  \"copy_GBps\": %.2f,\n  \"copy_note\": \"cudaMemcpyAsync D2D of 1 GiB, (read + write bytes) / time\",\n",
                 copy);
    std::fprintf(f,
                 "  \"host_to_device_GBps\": %.2f,\n  \"device_to_host_GBps\": %.2f,\n  \"swap_note\": \"prefill rows: "
                 "swap_ms = kv_bytes_per_seq out and back in at the host link's rates (1 GiB pinned cudaMemcpyAsync), "
                 "against recomputing the prompt (ms); swap_out_ms, swap_in_ms: DeviceKvCache::swap_out and swap_in "
                 "of the prompt's pages to and from pinned host memory, host clock (each waits for its copies); swap_pin_ms: "
                 "cudaMallocHost + cudaFreeHost of that memory, which DeviceRunner's PinnedPool pays once a buffer and reuses\",\n",
                 h2d, d2h);
    std::fprintf(f,
                 "  \"model\": \"Qwen3-8B shape, random BF16 weights: %d layers, E %d, %d q heads, %d kv heads, d %d, "
                 "F %d, V %d, qk_norm, untied, neox rope theta 1e6\",\n",
                 shape.n_layers, shape.n_embd, shape.n_heads, shape.n_kv_heads, shape.head_dim, shape.n_ff,
                 shape.n_vocab);
    std::fprintf(f,
                 "  \"kv_note\": \"bf16: bits 0; int2-oscar (int4-, int8-oscar): bits 2 (4, 8), G %d, sink %d, recent %d, k/v clip %.2f, R_K random "
                 "orthogonal per layer, R_V absorbed; caches filled by synthetic::fill_sequence (synthetic_cache.cuh)\",\n",
                 kGroup, kSink, kWindow, kClip);
    std::fprintf(f,
                 "  \"timing_note\": \"step() with use_graph, median of %d steps after %d warm-up ones, cudaEvents on "
                 "the model stream (idle before each step); wall_ms: host clock around step() + sync; every step "
                 "appends one token, T is the length before the first\",\n",
                 o.steps, o.warmup);
    std::fprintf(f,
                 "  \"bytes_note\": \"weight_bytes_read (weight_bytes() less the token-embedding table, of which "
                 "only B rows are read) + B * kv_bytes_per_seq (DeviceKvCache::bytes_for_length(T)); roofline_ms = "
                 "bytes / copy_GBps; frac_of_copy = roofline_ms / ms\",\n");
    std::fprintf(f, "  \"budget_gib\": %.3f,\n  \"max_batch\": %d,\n", o.budget_gib, o.max_batch);
    std::fprintf(f, "  \"rows\": [\n");
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      std::fprintf(f,
                   "    {\"kind\": \"%s\", \"B\": %d, \"T\": %lld, \"kv\": \"%s\", \"steps\": %d, \"ms\": %.5f, "
                   "\"wall_ms\": %.5f, \"tokens_per_s\": %.2f, \"bytes\": %.0f, \"roofline_ms\": %.5f, "
                   "\"frac_of_copy\": %.4f, \"kv_bytes_per_seq\": %zu, \"kv_bf16_bytes_per_seq\": %zu, "
                   "\"kv_bytes_reserved\": %zu, \"weight_bytes\": %zu, \"weight_bytes_read\": %zu, "
                   "\"swap_ms\": %.3f, \"swap_out_ms\": %.3f, \"swap_in_ms\": %.3f, \"swap_pin_ms\": %.3f, "
                   "\"note\": \"%s\"}%s\n",
                   r.kind.c_str(), r.batch, static_cast<long long>(r.seq), r.kv.c_str(), r.steps, r.ms, r.wall_ms,
                   r.tokens_per_s, r.bytes, r.roofline_ms, r.frac, r.kv_bytes_per_seq, r.kv_bf16_bytes_per_seq,
                   r.kv_bytes_reserved, r.weight_bytes, r.weight_bytes_read, r.kind == "prefill" ? swap_ms(r) : 0.0,
                   r.swap_out_ms, r.swap_in_ms, r.swap_pin_ms, json_escape(r.note).c_str(),
                   i + 1 < rows.size() ? "," : "");
    }
    std::fprintf(f, "  ],\n  \"ratios\": [\n");
    for (size_t i = 0; i < ratios.size(); ++i) {
      const Ratio& q = ratios[i];
      std::fprintf(f, "    {\"kind\": \"%s\", \"T\": %lld, \"kv\": \"%s\", \"tokens_per_s_vs_bf16\": %.4f}%s\n",
                   q.kind.c_str(), static_cast<long long>(q.seq), q.kv.c_str(), q.ratio,
                   i + 1 < ratios.size() ? "," : "");
    }
    std::fprintf(f, "  ]\n}\n");
    std::fclose(f);
    std::printf("wrote %s\n", json_path.c_str());
  }
  return failed ? 1 : 0;
}
