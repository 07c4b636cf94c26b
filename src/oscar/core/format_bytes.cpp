#include "oscar/core/format_bytes.h"

#include <fmt/format.h>

namespace oscar {

std::string format_bytes(int64_t bytes) {
  if (bytes >= (1LL << 30)) return fmt::format("{:.2f} GiB", double(bytes) / (1LL << 30));
  if (bytes >= (1LL << 20)) return fmt::format("{:.2f} MiB", double(bytes) / (1LL << 20));
  if (bytes >= (1LL << 10)) return fmt::format("{:.2f} KiB", double(bytes) / (1LL << 10));
  return fmt::format("{} B", bytes);
}

}  // namespace oscar
