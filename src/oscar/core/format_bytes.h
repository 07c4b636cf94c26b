// A byte count for people: "1.50 GiB", "12.00 MiB", "3.25 KiB", "512 B".
#pragma once
#include <cstdint>
#include <string>

namespace oscar {

std::string format_bytes(int64_t bytes);

}  // namespace oscar
