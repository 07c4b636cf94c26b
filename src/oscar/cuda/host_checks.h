// Host-side error reporting shared by the CUDA entry points: a std::runtime_error that
// names the entry point, and the check after a kernel launch. Internal to src/oscar/cuda.
#pragma once
#include <stdexcept>
#include <string>

#include <cuda_runtime.h>

namespace oscar::cuda::detail {

[[noreturn]] inline void fail(const std::string& what, const std::string& detail) {
  throw std::runtime_error(what + ": " + detail);
}

// Throws when the last launch failed (bad configuration, no device, …).
inline void check_launch(const std::string& what) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) fail(what, std::string("launch: ") + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

}  // namespace oscar::cuda::detail
