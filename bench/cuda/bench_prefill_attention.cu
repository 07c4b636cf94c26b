// Prefill attention alone at the Qwen3-8B shape (32 query heads, 8 KV heads, head_dim 128):
// one prompt of T tokens attended in chunks of C query tokens, as the engine launches it
// (chunk i: queries [iC, iC + C) over keys [0, iC + C)), with the Hopper (wgmma) kernel and
// the portable mma.sync one, BF16 and INT2 caches (sink 64, window 256, G 128). TFLOP/s
// counts 4·d·heads·Σ keys per query (the causal work, nothing masked), and is set beside a
// plain BF16 matmul (cuBLAS, 8192³, f32 accumulate) measured in the same run.
//   bench_prefill_attention [--json PATH] [--commit SHA] [--lengths 8192,32768] [--chunk C] [--iters N]
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <sstream>
#include <string>
#include <vector>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "oscar/cuda/check_cuda.h"
#include "oscar/cuda/decode_attention.h"
#include "oscar/cuda/prefill_attention.h"
#include "bench_util.cuh"

namespace {

constexpr int kHeads = 32, kKvHeads = 8, kDim = 128, kGroup = 128, kSink = 64, kWindow = 256;
constexpr int kPage = oscar::cuda::kDecodeFpBlockTokens, kHistPage = oscar::cuda::kDecodeHistBlockTokens;

struct Row {
  int T = 0, chunk = 0, bits = 0;
  std::string kernel;
  double ms = 0, tflops = 0, frac_of_matmul = 0;
};

int history_end(int bits, int len) { return bits == 0 ? kSink : kSink + std::max(0, len - kSink - kWindow); }

// Median ms of the whole prompt's attention (every chunk's launch) and its TFLOP/s.
Row measure(int T, int chunk, int bits, oscar::cuda::PrefillKernel kernel, int iters) {
  Row row;
  row.T = T, row.chunk = chunk, row.bits = bits;
  row.kernel = kernel == oscar::cuda::PrefillKernel::fastest ? "fastest" : "mma.sync";
  const int n_pages = (T + kPage - 1) / kPage, n_hist_pages = (T + kHistPage - 1) / kHistPage;
  const size_t row_bytes = bits == 0 ? 0 : oscar::cuda::decode_quant_row_bytes(kDim, bits, kGroup);
  Allocs a;
  auto* q = static_cast<float*>(a.get(size_t(chunk) * kHeads * kDim * sizeof(float)));
  auto* out = static_cast<float*>(a.get(size_t(chunk) * kHeads * kDim * sizeof(float)));
  auto* fp_k = static_cast<uint16_t*>(a.get(size_t(n_pages) * kKvHeads * kPage * kDim * 2));
  auto* fp_v = static_cast<uint16_t*>(a.get(size_t(n_pages) * kKvHeads * kPage * kDim * 2));
  auto* hist_k = static_cast<uint8_t*>(a.get(size_t(n_hist_pages) * kKvHeads * kHistPage * std::max<size_t>(row_bytes, 1)));
  auto* hist_v = static_cast<uint8_t*>(a.get(size_t(n_hist_pages) * kKvHeads * kHistPage * std::max<size_t>(row_bytes, 1)));
  auto* tables = static_cast<int32_t*>(a.get(size_t(n_pages + n_hist_pages) * sizeof(int32_t)));
  auto* lens = static_cast<int32_t*>(a.get(size_t(T) * 2 * sizeof(int32_t)));
  auto* scratch = static_cast<uint16_t*>(a.get(size_t(2) * kKvHeads * T * kDim * 2));
  if (!a.ok) return row;
  fill(fp_k, size_t(n_pages) * kKvHeads * kPage * kDim * 2, 4);
  fill(fp_v, size_t(n_pages) * kKvHeads * kPage * kDim * 2, 5);
  if (bits != 0) {
    fill(hist_k, size_t(n_hist_pages) * kKvHeads * kHistPage * row_bytes, 6);
    fill(hist_v, size_t(n_hist_pages) * kKvHeads * kHistPage * row_bytes, 7);
  }
  std::vector<int32_t> table(size_t(n_pages + n_hist_pages)), len_he(size_t(T) * 2);
  for (int i = 0; i < n_pages; ++i) table[size_t(i)] = (i * 7919) % n_pages;  // scattered pages
  for (int i = 0; i < n_hist_pages; ++i) table[size_t(n_pages + i)] = (i * 104729) % n_hist_pages;
  for (int t = 0; t < T; ++t) len_he[size_t(t)] = t + 1, len_he[size_t(T + t)] = history_end(bits, t + 1);
  CHECK_CUDA(cudaMemcpy(tables, table.data(), table.size() * 4, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(lens, len_he.data(), len_he.size() * 4, cudaMemcpyHostToDevice));
  // q: values in [-1, 1].
  std::vector<float> qh(size_t(chunk) * kHeads * kDim);
  for (size_t i = 0; i < qh.size(); ++i) qh[i] = float(int(i * 2654435761u % 2001) - 1000) / 1000.0f;
  CHECK_CUDA(cudaMemcpy(q, qh.data(), qh.size() * 4, cudaMemcpyHostToDevice));

  const auto run_all = [&] {
    for (int t0 = 0; t0 < T; t0 += chunk) {
      const int n = std::min(chunk, T - t0);
      oscar::cuda::PrefillAttentionParams p;
      p.n_tokens = n, p.n_heads = kHeads, p.n_kv_heads = kKvHeads, p.head_dim = kDim;
      p.bits = bits, p.group = kGroup, p.sink = kSink;
      p.q = q, p.seq_len = lens + t0, p.out = out;
      p.fp_k = fp_k, p.fp_v = fp_v, p.fp_blocks = tables;
      if (bits != 0) {
        p.hist_end = lens + T + t0, p.hist_k = hist_k, p.hist_v = hist_v, p.hist_blocks = tables + n_pages;
        p.max_hist_end = history_end(bits, t0 + n);
        p.scratch = scratch;
      }
      oscar::cuda::prefill_attention(p, nullptr, kernel);
    }
  };
  row.ms = median_ms(1, iters, [] {}, run_all);
  double keys = 0;  // Σ over queries of the keys each sees
  for (int t = 0; t < T; ++t) keys += t + 1;
  row.tflops = 4.0 * kDim * kHeads * keys / (row.ms * 1e-3) / 1e12;
  return row;
}

// cuBLAS BF16 GEMM (f32 accumulate) of n³: TFLOP/s.
double matmul_tflops(int n, int iters) {
  Allocs a;
  void* A = a.get(size_t(n) * n * 2);
  void* B = a.get(size_t(n) * n * 2);
  void* C = a.get(size_t(n) * n * 2);
  if (!a.ok) return 0;
  fill(A, size_t(n) * n * 2, 1);
  fill(B, size_t(n) * n * 2, 2);
  cublasHandle_t h;
  if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) return 0;
  const float one = 1.0f, zero = 0.0f;
  const float ms = median_ms(3, iters, [] {}, [&] {
    cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, A, CUDA_R_16BF, n, B, CUDA_R_16BF, n, &zero, C,
                 CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  });
  cublasDestroy(h);
  return 2.0 * double(n) * n * n / (ms * 1e-3) / 1e12;
}

}  // namespace

int main(int argc, char** argv) {
  std::string json_path, commit, command, lengths = "8192,32768";
  int chunk = 1024, iters = 5;
  for (int i = 0; i < argc; ++i) command += (i ? " " : "") + std::string(argv[i]);
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--json" && i + 1 < argc) json_path = argv[++i];
    else if (a == "--commit" && i + 1 < argc) commit = argv[++i];
    else if (a == "--lengths" && i + 1 < argc) lengths = argv[++i];
    else if (a == "--chunk" && i + 1 < argc) chunk = std::max(1, std::atoi(argv[++i]));
    else if (a == "--iters" && i + 1 < argc) iters = std::max(1, std::atoi(argv[++i]));
    else {
      std::fprintf(stderr, "usage: %s [--json PATH] [--commit SHA] [--lengths T,T] [--chunk C] [--iters N]\n", argv[0]);
      return 2;
    }
  }
  if (commit.empty()) commit = std::getenv("OSCAR_COMMIT") ? std::getenv("OSCAR_COMMIT") : "unknown";
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  char date[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&now));

  const double mm = matmul_tflops(8192, 20);
  std::printf("device %s; commit %s; %s; bf16 matmul 8192^3: %.1f TFLOP/s\n", prop.name, commit.c_str(), date, mm);
  std::vector<Row> rows;
  std::stringstream ls(lengths);
  for (std::string tok; std::getline(ls, tok, ',');) {
    const int T = std::atoi(tok.c_str());
    if (T <= 0) continue;
    for (int bits : {0, 2})
      for (auto k : {oscar::cuda::PrefillKernel::fastest, oscar::cuda::PrefillKernel::portable}) {
        Row r = measure(T, std::min(chunk, T), bits, k, iters);
        r.frac_of_matmul = mm > 0 ? r.tflops / mm : 0;
        std::printf("T %6d chunk %5d %-5s %-9s %9.2f ms  %6.1f TFLOP/s  %.3f of matmul\n", r.T, r.chunk,
                    bits ? "int2" : "bf16", r.kernel.c_str(), r.ms, r.tflops, r.frac_of_matmul);
        rows.push_back(r);
      }
  }
  if (!json_path.empty()) {
    FILE* f = std::fopen(json_path.c_str(), "w");
    if (!f) {
      std::fprintf(stderr, "cannot write %s\n", json_path.c_str());
      return 1;
    }
    std::fprintf(f, "{\n  \"device\": \"%s\",\n  \"date\": \"%s\",\n  \"commit\": \"%s\",\n  \"command\": \"%s\",\n",
                 json_escape(prop.name).c_str(), date, json_escape(commit).c_str(), json_escape(command).c_str());
    std::fprintf(f, "  \"matmul_tflops\": %.1f,\n  \"rows\": [\n", mm);
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      std::fprintf(f,
                   "    {\"bench\": \"prefill_attention\", \"shape\": \"qwen3-8b\", \"T\": %d, \"chunk\": %d, \"kv\": \"%s\", "
                   "\"kernel\": \"%s\", \"ms\": %.3f, \"tflops\": %.1f, \"frac_of_matmul\": %.3f}%s\n",
                   r.T, r.chunk, r.bits ? "int2" : "bf16", r.kernel.c_str(), r.ms, r.tflops, r.frac_of_matmul,
                   i + 1 < rows.size() ? "," : "");
    }
    std::fprintf(f, "  ]\n}\n");
    std::fclose(f);
    std::printf("wrote %s\n", json_path.c_str());
  }
  return 0;
}
