// A sequence of length t with random contents in a DeviceKvCache, for benchmarks that time
// decode over a deep cache without prefilling it: the pages come as a prefill takes them
// (begin_tokens / end_tokens in runs of 64 tokens, within the few pages beyond its window a
// cache keeps per sequence for a launch: the window's fp pages, the history's pages), then
// every layer's K and V are filled with random BF16 rows in (−1, 1) and random history rows
// (random codes; per group an fp16 scale of 1/32 and zero of 1.5, values within about ±0.05).
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include <cuda_runtime.h>

#include "oscar/cuda/check_cuda.h"
#include "oscar/cuda/decode_attention.h"
#include "oscar/engine/cuda/device_kv_cache.h"

namespace synthetic {

__device__ inline uint32_t hash3(uint64_t seed, uint64_t a, uint64_t b) {
  uint64_t x = seed ^ (a * 0x9E3779B97F4A7C15ull) ^ (b * 0xC2B2AE3D27D4EB4Full);
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  x *= 0x94D049BB133111EBull;
  return uint32_t(x >> 32);
}

// BF16 values uniform in (−1, 1) over the listed pages (elems per page each).
__global__ inline void fill_fp_pages(uint16_t* pool, const int32_t* pages, int n_pages, int64_t elems, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < int64_t(n_pages) * elems;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t page = pages[i / elems];
    const float u = float(hash3(seed, uint64_t(page), uint64_t(i % elems))) * 0x1p-31f - 1.0f;
    const uint32_t bits = __float_as_uint(u);
    pool[page * elems + i % elems] = uint16_t((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
  }
}

// Random codes; per group fp16 scale 1/32 and zero 1.5.
__global__ inline void fill_hist_pages(uint8_t* pool, const int32_t* pages, int n_pages, int64_t rows_per_page,
                                       int row_bytes, int code_bytes, uint64_t seed) {
  const int64_t page_bytes = rows_per_page * row_bytes;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < int64_t(n_pages) * page_bytes;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t page = pages[i / page_bytes], within = i % page_bytes;
    const int byte = int(within % row_bytes);
    uint8_t v;
    if (byte < code_bytes) {
      v = uint8_t(hash3(seed, uint64_t(page), uint64_t(within)));
    } else {
      const int in_pair = (byte - code_bytes) % 4;  // fp16 scale (2 bytes), fp16 zero (2 bytes), little end first
      const uint16_t half = in_pair < 2 ? uint16_t(0x2800) : uint16_t(0x3E00);  // 1/32, 1.5
      v = uint8_t(in_pair % 2 == 0 ? half & 0xFF : half >> 8);
    }
    pool[page * page_bytes + within] = v;
  }
}

// Gives the empty `slot` a sequence of t tokens with random rows (see the top of the file).
inline void fill_sequence(oscar::cuda::DeviceKvCache& cache, int slot, int64_t t, uint64_t seed, cudaStream_t stream) {
  using Pool = oscar::cuda::DeviceKvCache::Pool;
  constexpr int kPage = oscar::cuda::kDecodeFpBlockTokens, kHistPage = oscar::cuda::kDecodeHistBlockTokens;
  for (int64_t done = 0; done < t;) {
    const int64_t n = std::min<int64_t>(64, t - done);
    cache.begin_tokens(slot, n);
    cache.end_tokens(slot, n);
    done += n;
  }
  std::vector<int32_t> fp_pages, hist_pages;
  for (int64_t i = 0; i < (t + kPage - 1) / kPage; ++i)
    if (const int32_t p = cache.entry(Pool::fp, slot, i); p >= 0) fp_pages.push_back(p);
  const int64_t h = cache.format().any_history() ? cache.history_end(t) : 0;
  for (int64_t i = 0; i < (std::max<int64_t>(0, h - cache.format().sink) + kHistPage - 1) / kHistPage; ++i)
    if (const int32_t p = cache.entry(Pool::hist, slot, i); p >= 0) hist_pages.push_back(p);
  CHECK_CUDA(cudaDeviceSynchronize());  // the tables' uploads on the cache's stream
  int32_t* d_pages = nullptr;
  const size_t n_list = std::max<size_t>(1, std::max(fp_pages.size(), hist_pages.size()));
  CHECK_CUDA(cudaMalloc(&d_pages, n_list * 4));
  const int64_t fp_elems = int64_t(cache.n_kv_heads()) * kPage * cache.head_dim();
  for (int l = 0; l < cache.n_layers(); ++l) {
    if (!fp_pages.empty()) {
      CHECK_CUDA(cudaMemcpy(d_pages, fp_pages.data(), fp_pages.size() * 4, cudaMemcpyHostToDevice));
      fill_fp_pages<<<1024, 256, 0, stream>>>(cache.fp_k(l), d_pages, int(fp_pages.size()), fp_elems,
                                               seed * 131 + uint64_t(l) * 2);
      fill_fp_pages<<<1024, 256, 0, stream>>>(cache.fp_v(l), d_pages, int(fp_pages.size()), fp_elems,
                                               seed * 131 + uint64_t(l) * 2 + 1);
      CHECK_CUDA(cudaGetLastError());
      CHECK_CUDA(cudaStreamSynchronize(stream));
    }
    if (!hist_pages.empty() && cache.row_bytes(l) > 0) {
      CHECK_CUDA(cudaMemcpy(d_pages, hist_pages.data(), hist_pages.size() * 4, cudaMemcpyHostToDevice));
      const int rb = int(cache.row_bytes(l)), code_bytes = cache.head_dim() * cache.format().bits(l) / 8;
      const int64_t rows = int64_t(cache.n_kv_heads()) * kHistPage;
      fill_hist_pages<<<1024, 256, 0, stream>>>(cache.hist_k(l), d_pages, int(hist_pages.size()), rows, rb, code_bytes,
                                                 seed * 7 + uint64_t(l));
      fill_hist_pages<<<1024, 256, 0, stream>>>(cache.hist_v(l), d_pages, int(hist_pages.size()), rows, rb, code_bytes,
                                                 seed * 11 + uint64_t(l));
      CHECK_CUDA(cudaGetLastError());
      CHECK_CUDA(cudaStreamSynchronize(stream));
    }
  }
  CHECK_CUDA(cudaFree(d_pages));
}

}  // namespace synthetic
