#include "device_generate.h"

#include <fmt/format.h>


#include "oscar/core/error.h"
#if OSCAR_WITH_CUDA
#include <cuda_runtime.h>

#include "oscar/cuda_engine/device_runner.h"
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
std::unique_ptr<engine::Runner> make_runner(LoadedModel& m, const std::string& device, int max_seqs, int64_t capacity) {
  if (device != "cuda")
    return std::make_unique<CpuRunner>(*m.transformer, m.transformer->make_cache(int64_t(max_seqs) * capacity));
  auto r = std::make_unique<DeviceRunner>(*m.transformer, plan_device_kv(*m.transformer, 0, max_seqs, capacity), max_seqs,
                                          capacity);
  fmt::print(stderr, "device: {}\n", r->describe());
  return r;
}
#else
std::unique_ptr<engine::Runner> make_runner(LoadedModel& m, const std::string& device, int max_seqs, int64_t capacity) {
  check_device(device);
  return std::make_unique<CpuRunner>(*m.transformer, m.transformer->make_cache(int64_t(max_seqs) * capacity));
}
#endif

}  // namespace oscar::cli
