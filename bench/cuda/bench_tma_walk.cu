// The memory floor of the INT2 history walk's access pattern, without its arithmetic: warps
// that copy K and V blocks (2304 bytes each: one 64-row page of one KV head at d = 128) into a
// per-warp ring of shared-memory stages with TMA bulk copies, wait on each stage's mbarrier and
// touch one word, in random or sequential block order, for the bytes of (B = 1, T = 128K);
// beside a plain streaming read of the same bytes (bench_util.cuh's floor), in one process.
// Where decode attention at (1, 128K) is far from this floor, the loss is in its arithmetic
// and its overlap, not in how its bytes are laid out or requested (docs/cuda.md, "Measured").
//   bench_tma_walk [--json PATH] [--commit SHA]
#include <cstdio>
#include <ctime>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "bench_util.cuh"
#include "oscar/cuda/device_primitives.cuh"

namespace {

using oscar::cuda::detail::bulk_copy_to_smem;
using oscar::cuda::detail::mbar_arrive_expect;
using oscar::cuda::detail::mbar_init;
using oscar::cuda::detail::mbar_init_fence;
using oscar::cuda::detail::mbar_wait;

constexpr int kWarpsPerCta = 4;
constexpr int kMaxStepsPerWarp = 32;  // a warp's block ids fit one load, one per lane

// Warp w takes entries [w·per_warp, …) of `order` (block ids), copying block i of the K and
// V pools into stage i % stages, stages − 1 steps ahead of the one it waits for.
__global__ void tma_walk(const uint8_t* pk, const uint8_t* pv, const int* order, int n_blocks, int per_warp,
                         int bytes, int stages, int* sink) {
  extern __shared__ __align__(128) uint8_t smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int first = (blockIdx.x * kWarpsPerCta + warp) * per_warp;
  const int n = min(per_warp, n_blocks - first);
  if (n <= 0) return;
  uint8_t* ring = smem + size_t(warp) * stages * 2 * bytes;
  uint64_t* bars = reinterpret_cast<uint64_t*>(smem + size_t(kWarpsPerCta) * stages * 2 * bytes) + warp * stages;
  if (lane == 0) {
    for (int s = 0; s < stages; ++s) mbar_init(bars + s, 1);
    mbar_init_fence();
  }
  __syncwarp();
  const int block_of_lane = lane < n ? order[first + lane] : 0;
  const auto issue = [&](int i) {
    const int block = __shfl_sync(0xffffffffu, block_of_lane, i);
    uint8_t* dst = ring + size_t(i % stages) * 2 * bytes;
    if (lane == 0) mbar_arrive_expect(bars + i % stages, 2u * unsigned(bytes));
    if (lane < 2)
      bulk_copy_to_smem(dst + lane * bytes, (lane ? pv : pk) + size_t(block) * bytes, unsigned(bytes), bars + i % stages);
  };
  for (int i = 0; i < stages - 1 && i < n; ++i) issue(i);
  int acc = 0;
  for (int i = 0; i < n; ++i) {
    if (i + stages - 1 < n) issue(i + stages - 1);  // into the stage step i − 1 freed
    mbar_wait(bars + i % stages, unsigned(i / stages) & 1u);
    acc += *reinterpret_cast<const int*>(ring + size_t(i % stages) * 2 * bytes + lane * 16);
    __syncwarp();
  }
  if (acc == 0x7fffffff) *sink = acc;  // keeps the reads
}

struct Row {
  int bytes, ctas_per_sm, stages, per_warp;
  bool random;
  double ms, gbps, frac;
};

}  // namespace

int main(int argc, char** argv) {
  std::string json_path, commit = "unknown", command;
  for (int i = 0; i < argc; ++i) command += (i ? " " : "") + std::string(argv[i]);
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--json" && i + 1 < argc) json_path = argv[++i];
    else if (a == "--commit" && i + 1 < argc) commit = argv[++i];
    else {
      std::fprintf(stderr, "usage: %s [--json PATH] [--commit SHA]\n", argv[0]);
      return 2;
    }
  }
  int dev = 0, n_sm = 0, l2 = 0;
  cudaDeviceProp prop{};
  if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&prop, dev) != cudaSuccess) {
    std::fprintf(stderr, "no CUDA device\n");
    return 1;
  }
  n_sm = prop.multiProcessorCount;
  l2 = prop.l2CacheSize;
  Allocs flush_alloc;
  L2Flush flush;
  flush.bytes = size_t(l2) * 2;
  flush.buf = flush_alloc.get(flush.bytes);
  if (!flush_alloc.ok) return 1;
  const double copy = copy_gbps(20);
  // K + V history of (1, 128K) at the Qwen3-8B shape: 8 KV heads × 2043 pages × 2304 bytes each.
  const size_t total = size_t(2) * 8 * 2043 * 2304;
  read_floor_ms(total, n_sm, 30, [&] { flush(); });  // the first call in a process runs slow: a warm-up
  const float floor_ms = read_floor_ms(total, n_sm, 30, [&] { flush(); });
  std::printf("device %s, %d SMs; commit %s\ncopy %.0f GB/s; floor (one streaming read of %.1f MB) %.4f ms (%.3f of copy)\n",
              prop.name, n_sm, commit.c_str(), copy, total / 1e6, floor_ms, total / (floor_ms * 1e-3) / 1e9 / copy);
  std::printf("%6s %7s %8s %7s %9s %9s %8s %6s\n", "bytes", "order", "ctas/sm", "stages", "per-warp", "ms", "GB/s", "frac");
  std::vector<Row> rows;
  for (const int bytes : {2304, 4608}) {
    const int n_blocks = int(total / 2 / size_t(bytes));
    Allocs a;
    auto* pk = static_cast<uint8_t*>(a.get(size_t(n_blocks) * bytes));
    auto* pv = static_cast<uint8_t*>(a.get(size_t(n_blocks) * bytes));
    auto* order = static_cast<int*>(a.get(size_t(n_blocks) * sizeof(int)));
    auto* sink = static_cast<int*>(a.get(sizeof(int)));
    if (!a.ok) return 1;
    fill(pk, size_t(n_blocks) * bytes, 1);
    fill(pv, size_t(n_blocks) * bytes, 2);
    for (const bool random : {false, true}) {
      std::vector<int> o(static_cast<size_t>(n_blocks));
      std::iota(o.begin(), o.end(), 0);
      if (random) std::shuffle(o.begin(), o.end(), std::mt19937(7));
      CHECK_CUDA(cudaMemcpy(order, o.data(), o.size() * sizeof(int), cudaMemcpyHostToDevice));
      for (const int ctas_per_sm : {2, 3, 4})
        for (const int stages : {2, 3, 4}) {
          const size_t smem = size_t(kWarpsPerCta) * stages * (2 * size_t(bytes) + 8);
          if ((smem + 1024) * ctas_per_sm > size_t(prop.sharedMemPerMultiprocessor)) continue;
          const int grid = ctas_per_sm * n_sm, per_warp = (n_blocks + grid * kWarpsPerCta - 1) / (grid * kWarpsPerCta);
          if (per_warp > kMaxStepsPerWarp) continue;
          CHECK_CUDA(cudaFuncSetAttribute(tma_walk, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
          const float ms = median_ms(3, 30, [&] { flush(); }, [&] {
            tma_walk<<<grid, kWarpsPerCta * 32, smem>>>(pk, pv, order, n_blocks, per_warp, bytes, stages, sink);
          });
          CHECK_CUDA(cudaGetLastError());
          const double gbps = total / (ms * 1e-3) / 1e9;
          rows.push_back({bytes, ctas_per_sm, stages, per_warp, random, ms, gbps, gbps / copy});
          std::printf("%6d %7s %8d %7d %9d %9.4f %8.0f %6.3f\n", bytes, random ? "random" : "seq", ctas_per_sm, stages,
                      per_warp, ms, gbps, gbps / copy);
        }
    }
  }
  if (!json_path.empty()) {
    FILE* f = std::fopen(json_path.c_str(), "w");
    if (!f) {
      std::fprintf(stderr, "cannot write %s\n", json_path.c_str());
      return 1;
    }
    char date[32];
    const std::time_t now = std::time(nullptr);
    std::strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
    std::fprintf(f, "{\n  \"device\": \"%s\",\n  \"date\": \"%s\",\n  \"commit\": \"%s\",\n  \"command\": \"%s\",\n",
                 json_escape(prop.name).c_str(), date, json_escape(commit).c_str(), json_escape(command).c_str());
    std::fprintf(f, "  \"copy_GBps\": %.2f,\n  \"bytes\": %zu,\n  \"floor_ms\": %.5f,\n", copy, total, floor_ms);
    std::fprintf(f, "  \"note\": \"TMA bulk copies of K and V blocks into per-warp rings (4 warps per CTA, one wave), "
                    "no arithmetic; frac = GB/s / copy_GBps\",\n  \"rows\": [\n");
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      std::fprintf(f,
                   "    {\"block_bytes\": %d, \"order\": \"%s\", \"ctas_per_sm\": %d, \"stages\": %d, \"blocks_per_warp\": "
                   "%d, \"ms\": %.5f, \"GBps\": %.1f, \"frac_of_copy\": %.4f}%s\n",
                   r.bytes, r.random ? "random" : "sequential", r.ctas_per_sm, r.stages, r.per_warp, r.ms, r.gbps, r.frac,
                   i + 1 < rows.size() ? "," : "");
    }
    std::fprintf(f, "  ]\n}\n");
    std::fclose(f);
    std::printf("wrote %s\n", json_path.c_str());
  }
  return 0;
}
