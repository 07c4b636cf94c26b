#include "device_generate.h"

#include <fmt/format.h>

#include <chrono>
#include <random>
#include <stdexcept>

#include "oscar/core/error.h"
#if OSCAR_WITH_CUDA
#include <cuda_runtime.h>

#include "oscar/cuda_engine/device_model_loader.h"
#include "oscar/cuda_engine/device_runner.h"
#include "oscar/cuda_engine/device_weight_loader.h"
#endif

namespace oscar::cli {

void check_device(const std::string& device) {
  if (device == "cpu") return;
  if (device != "cuda") fail("--device {}: cpu or cuda", device);
#if OSCAR_WITH_CUDA
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0)
    fail("--device cuda: no CUDA device ({})", e != cudaSuccess ? cudaGetErrorString(e) : "none found");
#else
  fail("--device cuda: this oscar was built without the CUDA backend (no nvcc at configure time)");
#endif
}

#if OSCAR_WITH_CUDA
namespace {

// The configured model on the GPU for one sequence of up to `capacity` tokens at a time.
std::shared_ptr<cuda::DeviceModel> make_device_model(LoadedModel& m, int64_t capacity) {
  cuda::KvCacheLimits limits;
  limits.max_seqs = 1;
  limits.max_seq_len = capacity;
  std::shared_ptr<cuda::DeviceModel> dm;
  DeviceLoadStats stats;
  try {
    dm = load_device_model(*m.transformer, limits, cuda::GemmPrecision::bf16, &stats);
  } catch (const std::runtime_error& e) {
    fail("--device cuda: {}", e.what());
  }
  fmt::print(stderr, "device: weights {:.2f} GiB (BF16, streamed from {:.2f} GiB stored in {:.1f} s), KV cache {:.2f} "
             "GiB reserved\n", double(dm->weight_bytes()) / (1 << 30), double(stats.file_bytes) / (1 << 30),
             stats.seconds, double(dm->cache().bytes_reserved()) / (1 << 30));
  return dm;
}

}  // namespace

std::unique_ptr<engine::Runner> make_runner(LoadedModel& m, const std::string& device, int max_seqs, int64_t capacity) {
  if (device != "cuda")
    return std::make_unique<CpuRunner>(*m.transformer, m.transformer->make_cache(int64_t(max_seqs) * capacity));
  auto r = std::make_unique<DeviceRunner>(*m.transformer, plan_device_kv(*m.transformer, 0, max_seqs, capacity), max_seqs,
                                          capacity);
  fmt::print(stderr, "device: {}\n", r->describe());
  return r;
}

ChunkLogitsFn device_chunk_logits(LoadedModel& m, int n_ctx) {
  const std::shared_ptr<cuda::DeviceModel> dm = make_device_model(m, n_ctx);
  return [dm](std::span<const int32_t> chunk, int first, std::vector<float>& logits) -> int64_t {
    const int slot = dm->cache().add_sequence();
    try {
      dm->prefill(slot, std::vector<int32_t>(chunk.begin(), chunk.end()), &logits, first);
    } catch (const std::runtime_error& e) {
      fail("--device cuda: {}", e.what());
    }
    const int64_t bytes = int64_t(dm->cache().bytes_for_length(int64_t(chunk.size())));
    dm->cache().remove_sequence(slot);
    return bytes;
  };
}
#else
ChunkLogitsFn device_chunk_logits(LoadedModel&, int) {
  check_device("cuda");
  return {};
}

std::unique_ptr<engine::Runner> make_runner(LoadedModel& m, const std::string& device, int max_seqs, int64_t capacity) {
  check_device(device);
  return std::make_unique<CpuRunner>(*m.transformer, m.transformer->make_cache(int64_t(max_seqs) * capacity));
}
#endif

}  // namespace oscar::cli
