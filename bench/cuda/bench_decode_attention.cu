// Decode attention at Qwen3-8B shapes (32 query heads, 8 KV heads, head_dim 128, G 128)
// over BF16 / INT8 / INT4 / INT2 caches: median kernel time, bytes moved, GB/s, and the
// fraction of the device-to-device copy bandwidth measured in the same process.
//   bench_decode_attention [--json PATH] [--commit SHA] [--iters N] [--only B T KV] [--chunk KEYS] [--flush read|write]
//                          [--key-bias]
// --key-bias: INT2 and BF16 with and without --k-bias-split (-kb rows: key_bias_scores, then
// the attention kernel adding its f32 scores; ms is both launches).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "oscar/cuda/check_cuda.h"
#include "oscar/cuda/decode_attention.h"
#include "oscar/cuda/key_bias.h"
#include "bench_util.cuh"

namespace {

constexpr int kHeads = 32, kKvHeads = 8, kDim = 128, kGroup = 128, kSink = 64, kWindow = 256, kPage = oscar::cuda::kDecodeFpBlockTokens;
constexpr int kHistPage = oscar::cuda::kDecodeHistBlockTokens;

struct Row {
  int batch = 0, seq = 0;
  std::string kv;
  int chunk = 0;
  double ms = 0, bytes = 0, gbps = 0, frac = 0;
  double floor_ms = 0;  // one streaming read of `bytes` (bench_util.cuh: read_floor_ms)
  std::string note;
};

struct Kv {
  const char* name;
  int bits;                   // 0: BF16 only
  bool tensor_cores = true;   // false: INT2/INT4 on the CUDA-core kernel, for comparison
  bool key_bias = false;      // --k-bias-split: the bias scores' pre-kernel and their addition
};

// One (B, T, kv) measurement. Every sequence has length T; pages are shuffled in the pools.
Row measure(int batch, int seq, const Kv& kv, int iters, int n_sm, L2Flush& flush, double copy,
            int chunk) {
  Row row;
  row.batch = batch;
  row.seq = seq;
  row.kv = kv.name;
  const int hist_end = kv.bits == 0 ? std::min(kSink, seq) : kSink + std::max(0, seq - kSink - kWindow);
  const int n_hist = hist_end - std::min(kSink, seq), n_fp = seq - n_hist;
  const int pages_per_seq = (seq + kPage - 1) / kPage;
  const int hist_pages_per_seq = (n_hist + kHistPage - 1) / kHistPage;
  const size_t row_bytes = kv.bits == 0 ? 0 : oscar::cuda::decode_quant_row_bytes(kDim, kv.bits, kGroup);

  // Page tables: fp pages only where a token is sink or recent.
  std::mt19937 rng(uint32_t(batch * 131 + seq + kv.bits + (kv.tensor_cores ? 0 : 1000)));
  std::vector<int32_t> fp_blocks(size_t(batch) * pages_per_seq, -1), hist_blocks;
  int n_fp_blocks = 0;
  for (int b = 0; b < batch; ++b)
    for (int p = 0; p < pages_per_seq; ++p) {
      const int first = p * kPage, last = std::min(seq, first + kPage) - 1;
      const bool all_hist = first >= kSink && last < hist_end;
      if (!all_hist) fp_blocks[size_t(b) * pages_per_seq + p] = n_fp_blocks++;
    }
  std::vector<int32_t> perm(static_cast<size_t>(n_fp_blocks));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  for (int32_t& x : fp_blocks)
    if (x >= 0) x = perm[size_t(x)];
  const int n_hist_blocks = batch * hist_pages_per_seq;
  hist_blocks.resize(size_t(std::max(n_hist_blocks, 1)));
  std::iota(hist_blocks.begin(), hist_blocks.end(), 0);
  std::shuffle(hist_blocks.begin(), hist_blocks.end(), rng);

  const size_t fp_pool = size_t(n_fp_blocks) * kKvHeads * kPage * kDim * 2;
  const size_t hist_pool = size_t(n_hist_blocks) * kKvHeads * kHistPage * row_bytes;
  oscar::cuda::DecodeAttentionParams p;
  p.batch = batch;
  p.n_heads = kHeads;
  p.n_kv_heads = kKvHeads;
  p.head_dim = kDim;
  p.bits = kv.bits;
  p.group = kGroup;
  p.sink = kSink;
  p.max_seq_len = seq;
  p.max_window_keys = n_fp;
  p.tensor_cores = kv.tensor_cores;
  p.chunk_keys = chunk > 0 ? chunk : oscar::cuda::decode_attention_default_chunk(p, n_sm);
  row.chunk = p.chunk_keys;

  Allocs a;
  auto* q = static_cast<float*>(a.get(size_t(batch) * kHeads * kDim * 4));
  auto* out = static_cast<float*>(a.get(size_t(batch) * kHeads * kDim * 4));
  auto* lens = static_cast<int32_t*>(a.get(size_t(batch) * 4));
  auto* hend = static_cast<int32_t*>(a.get(size_t(batch) * 4));
  auto* fpb = static_cast<int32_t*>(a.get(fp_blocks.size() * 4));
  auto* hb = static_cast<int32_t*>(a.get(hist_blocks.size() * 4));
  auto* fpk = static_cast<uint16_t*>(a.get(fp_pool));
  auto* fpv = static_cast<uint16_t*>(a.get(fp_pool));
  auto* hk = static_cast<uint8_t*>(kv.bits ? a.get(hist_pool) : nullptr);
  auto* hv = static_cast<uint8_t*>(kv.bits ? a.get(hist_pool) : nullptr);
  auto* ws = static_cast<float*>(a.get(oscar::cuda::decode_attention_workspace_bytes(p)));
  const std::vector<double> inv_freq = [] {
    std::vector<double> f(kDim / 2);
    for (int i = 0; i < kDim / 2; ++i) f[size_t(i)] = std::pow(1e6, -2.0 * i / kDim);
    return f;
  }();
  const std::vector<float> cs_table = oscar::cuda::key_bias_cs_table(inv_freq, 1.0);
  auto* kb_coef = static_cast<float*>(kv.key_bias ? a.get(size_t(batch) * kHeads * kDim * 4) : nullptr);
  auto* kb_scores = static_cast<float*>(kv.key_bias ? a.get(size_t(batch) * kHeads * seq * 4) : nullptr);
  auto* kb_freq = static_cast<double*>(kv.key_bias ? a.get(inv_freq.size() * 8) : nullptr);
  auto* kb_cs = static_cast<float*>(kv.key_bias ? a.get(cs_table.size() * 4) : nullptr);
  if (!a.ok) {
    row.note = "skipped: does not fit in device memory";
    return row;
  }
  std::vector<float> hq(size_t(batch) * kHeads * kDim);
  std::normal_distribution<float> normal(0.f, 1.f);
  for (float& x : hq) x = normal(rng);
  const std::vector<int32_t> hlens(size_t(batch), seq), hends(size_t(batch), hist_end);
  CHECK_CUDA(cudaMemcpy(q, hq.data(), hq.size() * 4, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(lens, hlens.data(), hlens.size() * 4, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(hend, hends.data(), hends.size() * 4, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(fpb, fp_blocks.data(), fp_blocks.size() * 4, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(hb, hist_blocks.data(), hist_blocks.size() * 4, cudaMemcpyHostToDevice));
  fill(fpk, fp_pool, 2);
  fill(fpv, fp_pool, 3);
  if (kv.bits) {
    fill(hk, hist_pool, 4);
    fill(hv, hist_pool, 5);
  }
  p.q = q;
  p.seq_len = lens;
  p.fp_k = fpk;
  p.fp_v = fpv;
  p.fp_blocks = fpb;
  p.fp_blocks_stride = pages_per_seq;
  if (kv.bits) {
    p.hist_end = hend;
    p.hist_k = hk;
    p.hist_v = hv;
    p.hist_blocks = hb;
    p.hist_blocks_stride = hist_pages_per_seq;
  }
  p.workspace = ws;
  p.out = out;
  oscar::cuda::KeyBiasScoresParams kb;
  if (kv.key_bias) {
    std::vector<float> coef(hq.size());
    for (float& x : coef) x = 0.1f * normal(rng);
    CHECK_CUDA(cudaMemcpy(kb_coef, coef.data(), coef.size() * 4, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(kb_freq, inv_freq.data(), inv_freq.size() * 8, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(kb_cs, cs_table.data(), cs_table.size() * 4, cudaMemcpyHostToDevice));
    kb.batch = batch, kb.n_heads = kHeads, kb.head_dim = kDim, kb.coef = kb_coef, kb.seq_len = lens;
    kb.inv_freq = kb_freq, kb.cs_table = kb_cs, kb.max_seq_len = seq, kb.out = kb_scores, kb.out_stride = seq;
    p.key_bias = kb_scores, p.key_bias_stride = seq;
  }

  // A cold L2 for every launch: small caches would otherwise be served from L2.
  row.ms = median_ms(3, iters, [&] { flush(); }, [&] {
    if (kv.key_bias) oscar::cuda::key_bias_scores(kb);
    oscar::cuda::decode_attention(p);
  });
  if (kv.key_bias) {
    const double kb_ms = median_ms(3, iters, [&] { flush(); }, [&] { oscar::cuda::key_bias_scores(kb); });
    char note[64];
    std::snprintf(note, sizeof note, "key_bias_scores alone %.4f ms", kb_ms);
    row.note = note;
  }
  std::vector<float> hout(hq.size());
  CHECK_CUDA(cudaMemcpy(hout.data(), out, hout.size() * 4, cudaMemcpyDeviceToHost));
  for (float x : hout)
    if (!std::isfinite(x)) {
      row.note = "non-finite output";
      break;
    }

  // Bytes that must move: every K and V byte of the cache read once, q read, out written
  // (the split-KV partials are overhead and not counted).
  const double kv_bytes = 2.0 * kKvHeads * (double(n_fp) * kDim * 2 + double(n_hist) * double(row_bytes));
  row.bytes = batch * (kv_bytes + 2.0 * kHeads * kDim * 4);
  row.gbps = row.bytes / (row.ms * 1e-3) / 1e9;
  row.frac = copy > 0 ? row.gbps / copy : 0.0;
  row.floor_ms = read_floor_ms(size_t(row.bytes), n_sm, iters, [&] { flush(); });
  return row;
}

}  // namespace

int main(int argc, char** argv) {
  std::string json_path, commit, command;
  int iters = 25;
  int only_batch = 0, only_seq = 0, chunk = 0;
  bool flush_read = true, key_bias = false;
  std::string only_kv;
  for (int i = 0; i < argc; ++i) command += (i ? " " : "") + std::string(argv[i]);
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--json" && i + 1 < argc) json_path = argv[++i];
    else if (a == "--commit" && i + 1 < argc) commit = argv[++i];
    else if (a == "--iters" && i + 1 < argc) iters = std::max(20, std::atoi(argv[++i]));
    else if (a == "--chunk" && i + 1 < argc) chunk = std::atoi(argv[++i]);  // keys per chunk (default: heuristic)
    else if (a == "--flush" && i + 1 < argc) {  // how the L2 is emptied before each launch
      const std::string how = argv[++i];
      if (how != "read" && how != "write") {
        std::fprintf(stderr, "--flush takes read or write\n");
        return 2;
      }
      flush_read = how == "read";
    }
    else if (a == "--key-bias") key_bias = true;
    else if (a == "--only" && i + 3 < argc) {  // one row: B T kv (for profilers)
      only_batch = std::atoi(argv[++i]);
      only_seq = std::atoi(argv[++i]);
      only_kv = argv[++i];
    }
    else {
      std::fprintf(stderr, "usage: %s [--json PATH] [--commit SHA] [--iters N>=20] [--only B T KV] [--chunk KEYS] [--flush read|write] [--key-bias]\n", argv[0]);
      return 2;
    }
  }
  if (commit.empty()) commit = std::getenv("OSCAR_COMMIT") ? std::getenv("OSCAR_COMMIT") : "unknown";

  int n_dev = 0;
  if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) {
    std::fprintf(stderr, "no CUDA device\n");
    return 1;
  }
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  L2Flush flush;
  flush.read = flush_read;
  flush.bytes = std::max<size_t>(size_t(prop.l2CacheSize) * 2, size_t(64) << 20);
  CHECK_CUDA(cudaMalloc(&flush.buf, flush.bytes));
  CHECK_CUDA(cudaMemset(flush.buf, 0, flush.bytes));

  const double copy = copy_gbps(iters);
  char date[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  std::printf("device %s, %d SMs, L2 %d MB; commit %s; %s\n", prop.name, prop.multiProcessorCount,
              prop.l2CacheSize >> 20, commit.c_str(), date);
  std::printf("copy bandwidth (D2D 1 GiB, read+write bytes / time): %.1f GB/s\n", copy);
  std::printf("Qwen3-8B layer: %d q heads, %d kv heads, d %d, G %d; sink %d, recent %d; median of %d, cold L2\n",
              kHeads, kKvHeads, kDim, kGroup, kSink, kWindow, iters);
  std::printf("kv: int8/int4/int2 on tensor cores; -cc: the same caches on the CUDA-core kernel\n");
  std::printf("flush: %s; floor: one streaming read of the same bytes (frac_f = floor / ms)\n",
              flush.read ? "read 2x L2 (no dirty lines)" : "memset 2x L2 (dirty lines written back during the launch)");
  std::printf("%4s %7s %7s %6s %10s %10s %9s %6s %9s %6s  %s\n", "B", "T", "kv", "chunk", "ms", "MB", "GB/s", "frac",
              "floor_ms", "frac_f", "note");

  const std::vector<std::pair<int, int>> shapes = {{1, 8192}, {1, 32768}, {1, 131072}, {8, 32768}, {32, 32768}, {64, 8192}};
  const std::vector<Kv> kvs =
      key_bias ? std::vector<Kv>{{"int2", 2}, {"int2-kb", 2, true, true}, {"bf16", 0}, {"bf16-kb", 0, true, true}}
               : std::vector<Kv>{{"bf16", 0},          {"int8", 8},          {"int4", 4},          {"int2", 2},
                                 {"int8-cc", 8, false}, {"int4-cc", 4, false}, {"int2-cc", 2, false}};
  std::vector<Row> rows;
  for (const auto& [batch, seq] : shapes)
    for (const Kv& kv : kvs) {
      if (!only_kv.empty() && (batch != only_batch || seq != only_seq || only_kv != kv.name)) continue;
      const Row r = measure(batch, seq, kv, iters, prop.multiProcessorCount, flush, copy, chunk);
      std::printf("%4d %7d %7s %6d %10.4f %10.1f %9.1f %6.3f %9.4f %6.3f  %s\n", r.batch, r.seq, r.kv.c_str(), r.chunk,
                  r.ms, r.bytes / 1e6, r.gbps, r.frac, r.floor_ms, r.ms > 0 ? r.floor_ms / r.ms : 0.0, r.note.c_str());
      std::fflush(stdout);
      rows.push_back(r);
    }
  CHECK_CUDA(cudaFree(flush.buf));

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
    std::fprintf(f, "  \"bytes_note\": \"K and V bytes of the cache read + q read + out written; kernel GBps = bytes / time\",\n");
    std::fprintf(f, "  \"flush\": \"%s\",\n", flush.read ? "read: a kernel reads 2x the L2 before each launch (no dirty lines)"
                                                        : "write: a memset of 2x the L2 before each launch (its dirty lines are written back during the launch)");
    std::fprintf(f, "  \"floor_note\": \"floor_ms: median time of one streaming read of the same bytes (16-byte loads, 8 CTAs of 256 threads per SM, same flush); frac_of_floor = floor_ms / ms\",\n");
    std::fprintf(f, "  \"rows\": [\n");
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      std::fprintf(f,
                   "    {\"B\": %d, \"T\": %d, \"kv\": \"%s\", \"chunk\": %d, \"ms\": %.5f, \"bytes\": %.0f, "
                   "\"GBps\": %.2f, \"frac_of_copy\": %.4f, \"floor_ms\": %.5f, \"frac_of_floor\": %.4f, \"note\": \"%s\"}%s\n",
                   r.batch, r.seq, r.kv.c_str(), r.chunk, r.ms, r.bytes, r.gbps, r.frac, r.floor_ms,
                   r.ms > 0 ? r.floor_ms / r.ms : 0.0, json_escape(r.note).c_str(),
                   i + 1 < rows.size() ? "," : "");
    }
    std::fprintf(f, "  ]\n}\n");
    std::fclose(f);
    std::printf("wrote %s\n", json_path.c_str());
  }
  return 0;
}
