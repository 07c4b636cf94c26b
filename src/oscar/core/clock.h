// Wall time for progress lines and reports.
#pragma once
#include <chrono>

namespace oscar {

// Seconds of steady-clock time since t0.
inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace oscar
