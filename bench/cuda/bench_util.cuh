// Helpers shared by the CUDA benchmarks (bench_decode_attention, bench_e2e_decode, bench_tma_walk): device
// allocations that may fail, finite random fills, event-timed medians, the
// device-to-device copy bandwidth every "fraction of copy" figure divides by, and JSON
// string escaping for their --json output.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "oscar/cuda/check_cuda.h"

namespace {

// Device allocations that may fail (a row that does not fit is skipped, not fatal).
struct Allocs {
  std::vector<void*> ptrs;
  bool ok = true;
  void* get(size_t bytes) {
    void* p = nullptr;
    if (!ok) return nullptr;
    if (cudaMalloc(&p, std::max<size_t>(bytes, 16)) != cudaSuccess) {
      (void)cudaGetLastError();  // clear the error; the caller checks ok
      ok = false;
      return nullptr;
    }
    ptrs.push_back(p);
    return p;
  }
  ~Allocs() {
    for (void* p : ptrs) cudaFree(p);
  }
};

// Random bytes with bit 6 clear: then every bf16 and fp16 read from them has an exponent
// field below all-ones and a magnitude below 2, so all values are finite.
__global__ void fill_finite(uint32_t* p, size_t n_words, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n_words; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t x = uint32_t(i) * 0x9e3779b9u ^ seed;
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    p[i] = x & 0xbfbfbfbfu;
  }
}

void fill(void* p, size_t bytes, uint32_t seed) {
  fill_finite<<<1024, 256>>>(static_cast<uint32_t*>(p), bytes / 4, seed);
  CHECK_CUDA(cudaGetLastError());
}

// Evicts the L2 by reading a buffer twice its size. Unlike a memset it leaves no dirty lines,
// whose write-back would add to the DRAM traffic of whatever is timed next. The xor of
// every word is stored only in the unlikely case it equals `never`, which keeps the loads.
__global__ void read_through(const uint4* p, size_t n, uint32_t never, uint32_t* sink) {
  uint32_t x = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const uint4 v = p[i];
    x ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (x == never) *sink = x;
}

// Reads n16 16-byte words of buf with `grid` CTAs of 256 threads (nothing is written).
void stream_read(void* buf, size_t n16, unsigned grid) {
  read_through<<<grid, 256>>>(static_cast<const uint4*>(buf), n16, 0x9e3779b9u, static_cast<uint32_t*>(buf));
  CHECK_CUDA(cudaGetLastError());
}

// A cold L2 before each timed launch. `read` (the default) reads the buffer; otherwise it
// is overwritten by a memset (what earlier results used: its dirty lines are written back
// while the timed kernel runs).
struct L2Flush {
  void* buf = nullptr;
  size_t bytes = 0;
  bool read = true;
  int count = 0;
  void operator()() {
    if (read) {
      stream_read(buf, bytes / 16, 1024);
    } else {
      CHECK_CUDA(cudaMemsetAsync(buf, count++ & 0xff, bytes));
    }
  }
};

// A string as the inside of a JSON string literal (the benchmarks' --json output).
std::string json_escape(const std::string& s) {
  std::string r;
  for (char c : s) {
    if (c == '"' || c == '\\') r += '\\';
    if (c == '\n') {
      r += "\\n";
      continue;
    }
    r += c;
  }
  return r;
}

float median(std::vector<float> v) {
  if (v.empty()) return 0.f;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median milliseconds of `timed` between two events over `iters` runs after `warmup`
// untimed ones; `before` runs ahead of each, outside the timed span.
template <typename Before, typename Timed>
float median_ms(int warmup, int iters, Before&& before, Timed&& timed) {
  cudaEvent_t e0, e1;
  CHECK_CUDA(cudaEventCreate(&e0));
  CHECK_CUDA(cudaEventCreate(&e1));
  std::vector<float> ms;
  for (int i = 0; i < warmup + iters; ++i) {
    before();
    CHECK_CUDA(cudaEventRecord(e0));
    timed();
    CHECK_CUDA(cudaEventRecord(e1));
    CHECK_CUDA(cudaEventSynchronize(e1));
    float t = 0.f;
    CHECK_CUDA(cudaEventElapsedTime(&t, e0, e1));
    if (i >= warmup) ms.push_back(t);
  }
  CHECK_CUDA(cudaEventDestroy(e0));
  CHECK_CUDA(cudaEventDestroy(e1));
  return median(ms);
}

// Median ms of one streaming read of `bytes` (cold L2, 8 CTAs of 256 threads per SM, 16-byte
// loads): what any kernel that must read those bytes once can hope for, launch and ramp
// included. 0 when the buffer does not fit.
template <typename Flush>
float read_floor_ms(size_t bytes, int n_sm, int iters, Flush&& flush) {
  Allocs a;
  const size_t n = (bytes + 15) / 16;
  void* buf = a.get(n * 16);
  if (!a.ok) return 0.f;
  fill(buf, n * 16, 7);
  const unsigned grid = unsigned(8 * std::max(n_sm, 1));
  return median_ms(3, iters, flush, [&] { stream_read(buf, n, grid); });
}

// Device-to-device copy bandwidth, counted as (bytes read + bytes written) / time.
double copy_gbps(int iters) {
  size_t bytes = size_t(1) << 30;
  Allocs a;
  void* src = a.get(bytes);
  void* dst = a.get(bytes);
  if (!a.ok) return 0.0;
  fill(src, bytes, 1);
  const float ms = median_ms(2, iters, [] {}, [&] { CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice)); });
  return 2.0 * double(bytes) / (double(ms) * 1e-3) / 1e9;
}

// Host <-> device bandwidth over the host link (1 GiB, pinned host memory), bytes / time:
// what swapping a sequence's KV pages out to host memory and back would move them at.
// 0 when the memory is not there.
double host_link_gbps(bool to_device, int iters) {
  const size_t bytes = size_t(1) << 30;
  Allocs a;
  void* dev = a.get(bytes);
  void* host = nullptr;
  if (!a.ok || cudaMallocHost(&host, bytes) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0.0;
  }
  std::fill_n(static_cast<char*>(host), bytes, char(1));
  const float ms = median_ms(2, iters, [] {}, [&] {
    CHECK_CUDA(to_device ? cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice)
                         : cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost));
  });
  CHECK_CUDA(cudaFreeHost(host));
  return double(bytes) / (double(ms) * 1e-3) / 1e9;
}

}  // namespace
