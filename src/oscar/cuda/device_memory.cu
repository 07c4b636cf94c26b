// Plain cudaMalloc blocks with a named out-of-memory error (device_memory.h).
#include "oscar/cuda/device_memory.h"

#include <stdexcept>

namespace oscar::cuda {
namespace {

std::string mib(size_t bytes) { return std::to_string((bytes + (1u << 20) - 1) >> 20) + " MiB"; }

}  // namespace

DeviceMemory& DeviceMemory::operator=(DeviceMemory&& o) noexcept {
  if (this != &o) {
    release();
    blocks_ = std::move(o.blocks_);
    bytes_ = o.bytes_;
    o.bytes_ = 0;
  }
  return *this;
}

void* DeviceMemory::allocate(size_t bytes, const std::string& what) {
  const size_t rounded = (bytes + 255) / 256 * 256;
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, rounded == 0 ? 256 : rounded);
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error state of a failed allocation
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    throw std::runtime_error(e == cudaErrorMemoryAllocation
                                 ? "out of GPU memory allocating " + what + ": " + mib(rounded) + " (free " +
                                       mib(free_b) + " of " + mib(total_b) + ")"
                                 : "cudaMalloc for " + what + " (" + mib(rounded) + "): " + cudaGetErrorString(e));
  }
  blocks_.push_back(p);
  bytes_ += rounded;
  return p;
}

void DeviceMemory::release() {
  for (void* p : blocks_) cudaFree(p);
  blocks_.clear();
  bytes_ = 0;
}

}  // namespace oscar::cuda
