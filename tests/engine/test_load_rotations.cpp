// engine::load_rotations: the rotation readers check a file's kv_layers against its layers
// (rotation/), and the loader checks the KV type names (kv's), naming the file.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "oscar/core/error.h"
#include "oscar/engine/model_loader.h"
#include "oscar/rotation/rotation_io.h"

namespace oscar::engine {
namespace {

namespace fs = std::filesystem;

RotationSet identity_set(int d, int n_layers) {
  RotationSet rs;
  rs.head_dim = d, rs.group_size = d, rs.sink_tokens = 4, rs.recent_tokens = 8;
  for (int l = 0; l < n_layers; ++l) {
    LayerRotation lr;
    lr.layer = l;
    lr.k_rotation.assign(size_t(d * d), 0.0f), lr.v_rotation.assign(size_t(d * d), 0.0f);
    for (int i = 0; i < d; ++i) lr.k_rotation[size_t(i * d + i)] = lr.v_rotation[size_t(i * d + i)] = 1.0f;
    lr.k_eigenvalues.assign(size_t(d), 1.0f), lr.v_eigenvalues.assign(size_t(d), 1.0f);
    lr.k_clip = 0.96f, lr.v_clip = 0.92f;
    rs.layers.push_back(std::move(lr));
  }
  return rs;
}

TEST(LoadRotations, KvLayersTypesAreCheckedAtLoadNamingTheFile) {
  const fs::path dir = fs::temp_directory_path() / ("oscar_load_rot_" + std::to_string(::getpid()));
  RotationSet rs = identity_set(8, 3);
  rs.kv_layers = "0:int8,2:int4";
  write_rotation_dir(rs, dir.string());
  EXPECT_EQ(load_rotations(dir.string()).kv_layers, "0:int8,2:int4");

  // A hand-edited manifest with a type the cache does not know.
  nlohmann::json m;
  std::ifstream(dir / "manifest.json") >> m;
  m["kv_layers"] = "0:int3";
  std::ofstream(dir / "manifest.json") << m.dump();
  try {
    load_rotations(dir.string());
    FAIL() << "an unknown KV type in kv_layers was accepted";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(dir.string()), std::string::npos) << msg;
    EXPECT_NE(msg.find("unknown KV type 'int3'"), std::string::npos) << msg;
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace oscar::engine
