// Bytes the process's heap holds for live allocations, as its allocator counts them: what a
// soak compares wave to wave beside RSS, which also counts what the allocator keeps after a
// free (ASan's size-class caches and quarantine, glibc's arenas).
#pragma once
#include <cstdint>

namespace oscar {

// ASan's allocator when the build has it, else glibc's mallinfo2 over all arenas; -1 where
// neither is there.
int64_t live_heap_bytes();

}  // namespace oscar
