#include "common.h"
#include "oscar/core/error.h"

namespace oscar::cli {

RotationSet load_rotations(const std::string& path) {
  fail("--rotations '{}': reading rotation files is not built yet", path);
}

}  // namespace oscar::cli
