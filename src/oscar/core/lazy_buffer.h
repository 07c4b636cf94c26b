// Zero-filled memory that the OS commits page by page on first touch (an anonymous map).
// The KV pools are sized for the whole context, but a sequence holds only what it has
// written: an INT2 cache's BF16 pages, say, are touched for the sink, the recent window
// and one prefill batch, and reused from there (BlockAllocator hands back the page freed
// last). A std::vector would zero, and so commit, all of it at construction.
#pragma once
#include <cstddef>
#include <cstdint>

namespace oscar {

class LazyBuffer {
 public:
  LazyBuffer() = default;
  // Throws oscar::Error (naming `what` and the size) when the address space is refused.
  LazyBuffer(size_t bytes, const char* what);
  ~LazyBuffer();
  LazyBuffer(const LazyBuffer&) = delete;
  LazyBuffer& operator=(const LazyBuffer&) = delete;
  LazyBuffer(LazyBuffer&& o) noexcept;
  LazyBuffer& operator=(LazyBuffer&& o) noexcept;

  uint8_t* data() { return data_; }
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace oscar
