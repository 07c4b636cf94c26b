// Device memory of the CUDA backend: plain cudaMalloc blocks (no managed memory) owned by
// one object, with the running total for the memory report, and an out-of-memory error
// that says what was being allocated, how much, and how much was free.
//
// Self-contained like decode_attention.h: depends on the CUDA runtime only.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <cuda_runtime.h>

namespace oscar::cuda {

class DeviceMemory {
 public:
  DeviceMemory() = default;
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  DeviceMemory(DeviceMemory&& o) noexcept : blocks_(std::move(o.blocks_)), bytes_(o.bytes_) { o.bytes_ = 0; }
  DeviceMemory& operator=(DeviceMemory&& o) noexcept;
  ~DeviceMemory() { release(); }

  // `bytes` (rounded up to 256) of device memory for `what`; throws std::runtime_error
  // "out of GPU memory allocating <what>: <n> MiB (free <f> of <t> MiB)" when it fails.
  void* allocate(size_t bytes, const std::string& what);
  template <class T>
  T* allocate_array(size_t n, const std::string& what) {
    return static_cast<T*>(allocate(n * sizeof(T), what));
  }
  size_t bytes() const { return bytes_; }
  void release();

 private:
  std::vector<void*> blocks_;
  size_t bytes_ = 0;
};

}  // namespace oscar::cuda
