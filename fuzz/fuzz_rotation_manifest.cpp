// A rotation directory's manifest.json on arbitrary bytes, beside two valid rotation files
// (2 layers, head_dim 8) written once at start: the JSON parse, every field's type and range,
// the per-layer entries, the file names it may give. What loads has passed validate().
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "fuzz_util.h"
#include "oscar/core/error.h"
#include "oscar/rotation/rotation_io.h"
#include "oscar/rotation/rotation_set.h"

namespace {
std::string g_dir;
}

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  char tmpl[] = "/tmp/oscar-fuzz-rot-XXXXXX";
  if (!mkdtemp(tmpl)) {
    std::perror("fuzz_rotation_manifest: mkdtemp");
    std::exit(1);
  }
  g_dir = tmpl;
  oscar::RotationSet rs;
  rs.head_dim = 8;
  rs.group_size = 8;
  for (int l = 0; l < 2; ++l) {
    oscar::LayerRotation lr;
    lr.layer = l;
    lr.k_clip = lr.v_clip = 0.97f;
    rs.layers.push_back(lr);
  }
  oscar::write_rotation_dir(rs, g_dir);
  std::atexit([] { std::filesystem::remove_all(g_dir); });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  {
    std::ofstream out(g_dir + "/manifest.json", std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), std::streamsize(size));
  }
  try {
    const oscar::RotationSet rs = oscar::read_rotation_dir(g_dir);
    rs.validate();  // must not throw: read_rotation_dir promises a validated set
    FUZZ_EXPECT(rs.head_dim == 8 && rs.layers.size() == 2);
  } catch (const oscar::Error&) {
  }
  return 0;
}
