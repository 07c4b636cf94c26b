#include "oscar/core/heap_stats.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define OSCAR_HEAP_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define OSCAR_HEAP_ASAN 1
#endif

#if defined(OSCAR_HEAP_ASAN)
#include <sanitizer/allocator_interface.h>
#elif defined(__GLIBC__)
#include <malloc.h>
#endif

namespace oscar {

int64_t live_heap_bytes() {
#if defined(OSCAR_HEAP_ASAN)
  return int64_t(__sanitizer_get_current_allocated_bytes());
#elif defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
  const struct mallinfo2 m = mallinfo2();
  return int64_t(m.uordblks + m.hblkhd);  // in-use chunks of the arenas, plus mmapped blocks
#else
  return -1;
#endif
}

}  // namespace oscar
