// oscar::Error for everything that comes from outside (files, flags, requests), and
// OSCAR_CHECK for internal invariants. Both carry a message naming what is wrong.
#pragma once
#include <fmt/format.h>
#include <stdexcept>
#include <string>

namespace oscar {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// Throws oscar::Error with a fmt-formatted message.
template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace oscar

// Always on (also in release builds): names the file, line and failed condition.
#define OSCAR_CHECK(cond, ...)                                                              \
  do {                                                                                      \
    if (!(cond)) {                                                                          \
      throw ::oscar::Error(fmt::format("{}:{}: check failed: {}: {}", __FILE__, __LINE__,   \
                                       #cond, fmt::format(__VA_ARGS__)));                   \
    }                                                                                       \
  } while (0)
