// A runner's swap space: preempted sequences' KV images in host memory, by handle, within
// a byte budget (--swap-space). The image type is the backend's (the CPU cache's
// KvSwapImage, the device cache's pinned copy); this only keeps them and counts bytes.
#pragma once
#include <cstdint>
#include <map>
#include <utility>

#include "oscar/core/error.h"

namespace oscar::engine {

struct SwapStats {
  int64_t capacity_bytes = 0, used_bytes = 0, images = 0;
};

template <typename Image>
class SwapSpace {
 public:
  void set_capacity(int64_t bytes) { capacity_ = bytes; }
  bool fits(int64_t bytes) const { return bytes <= capacity_ - used_; }
  int64_t put(Image image, int64_t bytes) {
    OSCAR_CHECK(fits(bytes), "swap space: {} bytes do not fit", bytes);
    used_ += bytes;
    images_.emplace(next_, Entry{std::move(image), bytes});
    return next_++;
  }
  const Image& get(int64_t handle) const { return entry(handle).image; }
  void drop(int64_t handle) {
    used_ -= entry(handle).bytes;
    images_.erase(handle);
  }
  SwapStats stats() const { return {capacity_, used_, int64_t(images_.size())}; }

 private:
  struct Entry {
    Image image;
    int64_t bytes = 0;
  };
  const Entry& entry(int64_t handle) const {
    auto it = images_.find(handle);
    OSCAR_CHECK(it != images_.end(), "unknown swap handle {}", handle);
    return it->second;
  }
  int64_t capacity_ = 0, used_ = 0, next_ = 0;
  std::map<int64_t, Entry> images_;
};

}  // namespace oscar::engine
