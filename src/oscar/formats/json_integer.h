// A JSON value read as an integer in a range. nlohmann's get<int>() converts a float, or an
// integer too large for the type, without a check (a float out of range is undefined
// behaviour: found by fuzz_rotation_manifest), so the files' readers check here first.
#pragma once
#include <cstdint>
#include <limits>

#include <nlohmann/json.hpp>

namespace oscar {

struct JsonInteger {
  bool integer = false;   // a JSON integer (not a float, string, …)
  bool in_range = false;  // and within [lo, hi]
  int64_t value = 0;      // its value, an unsigned one past int64's range read as int64's max
};

inline JsonInteger json_integer(const nlohmann::json& v, int64_t lo, int64_t hi) {
  if (!v.is_number_integer()) return {};
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  const bool huge = v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(kMax);
  const int64_t x = huge ? kMax : v.get<int64_t>();
  return {true, !huge && x >= lo && x <= hi, x};
}

}  // namespace oscar
