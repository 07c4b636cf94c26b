#include "oscar/core/lazy_buffer.h"

#include <sys/mman.h>

#include <utility>

#include "oscar/core/error.h"

namespace oscar {

LazyBuffer::LazyBuffer(size_t bytes, const char* what) : size_(bytes) {
  if (bytes == 0) return;
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) fail("out of memory reserving {} ({:.1f} MiB)", what, double(bytes) / (1 << 20));
  data_ = static_cast<uint8_t*>(p);
}

LazyBuffer::~LazyBuffer() {
  if (data_) munmap(data_, size_);
}

LazyBuffer::LazyBuffer(LazyBuffer&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}

LazyBuffer& LazyBuffer::operator=(LazyBuffer&& o) noexcept {
  if (this != &o) {
    if (data_) munmap(data_, size_);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

}  // namespace oscar
