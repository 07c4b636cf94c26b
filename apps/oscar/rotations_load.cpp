#include "common.h"
#include "oscar/core/error.h"
#include "oscar/formats/gguf.h"
#include "oscar/kv/rotation_gguf.h"
#include "oscar/kv/rotation_io.h"

namespace oscar::cli {

RotationSet load_rotations(const std::string& path) {
  if (path.ends_with(".gguf")) {
    auto rs = read_embedded_rotations(gguf::GgufFile::open(path));
    if (!rs) fail("'{}' holds no OSCAR rotations (make them with `oscar rotations embed`)", path);
    return *rs;
  }
  return read_rotation_dir(path);
}

}  // namespace oscar::cli
