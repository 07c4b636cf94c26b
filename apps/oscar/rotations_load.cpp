#include "common.h"
#include "oscar/kv/rotation_io.h"

namespace oscar::cli {

RotationSet load_rotations(const std::string& path) { return read_rotation_dir(path); }

}  // namespace oscar::cli
