// RotationZoo directories: the fixture made by torch.save (tests/data/pt/rotation*),
// write → read round trips, errors naming file and layer, and (when torch is installed
// by tests/reference/torch_cpu.sh) torch.load(weights_only=True) of what we write.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "../test_util.h"
#include "oscar/core/error.h"
#include "oscar/formats/torch_pt.h"
#include "oscar/rotation/rotation_io.h"

namespace oscar {
namespace {

namespace fs = std::filesystem;
const std::string data_dir = std::string(OSCAR_SOURCE_DIR) + "/tests/data/pt/";

std::vector<float> json_floats(const nlohmann::json& t) {
  std::vector<float> v;
  for (double x : t["values"].get<std::vector<double>>()) v.push_back(static_cast<float>(x));
  return v;
}

// A random orthogonal d×d matrix: Gram–Schmidt on random rows, in double.
std::vector<float> random_orthogonal(int d, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> n(0.0, 1.0);
  std::vector<double> q(static_cast<size_t>(d) * static_cast<size_t>(d));
  for (int i = 0; i < d; ++i) {
    double* r = &q[static_cast<size_t>(i) * static_cast<size_t>(d)];
    for (int j = 0; j < d; ++j) r[j] = n(rng);
    for (int pass = 0; pass < 2; ++pass)
      for (int k = 0; k < i; ++k) {
        const double* o = &q[static_cast<size_t>(k) * static_cast<size_t>(d)];
        double dot = 0;
        for (int j = 0; j < d; ++j) dot += r[j] * o[j];
        for (int j = 0; j < d; ++j) r[j] -= dot * o[j];
      }
    double norm = 0;
    for (int j = 0; j < d; ++j) norm += r[j] * r[j];
    for (int j = 0; j < d; ++j) r[j] /= std::sqrt(norm);
  }
  return std::vector<float>(q.begin(), q.end());
}

struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& tag)
      : path(fs::temp_directory_path() / fmt::format("oscar_rot_{}_{}", tag, ::getpid())) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

RotationSet sample_set(int d, int n_layers) {
  RotationSet rs;
  rs.head_dim = d;
  rs.group_size = d / 2;
  rs.sink_tokens = 3;
  rs.recent_tokens = 17;
  for (int i = 0; i < n_layers; ++i) {
    LayerRotation l;
    l.layer = i;
    l.k_rotation = random_orthogonal(d, 10 + static_cast<uint64_t>(i));
    l.v_rotation = random_orthogonal(d, 100 + static_cast<uint64_t>(i));
    for (int j = 0; j < d; ++j) {
      l.k_eigenvalues.push_back(0.5f * static_cast<float>(j));
      l.v_eigenvalues.push_back(static_cast<float>(j * j));
    }
    l.k_clip = 0.9f + 0.01f * static_cast<float>(i);
    l.v_clip = 0.85f;
    rs.layers.push_back(std::move(l));
  }
  return rs;
}

using test::error_of;

nlohmann::json read_manifest(const fs::path& dir) {
  std::ifstream in(dir / "manifest.json");
  return nlohmann::json::parse(in);
}
void write_manifest(const fs::path& dir, const nlohmann::json& m) { std::ofstream(dir / "manifest.json") << m.dump(); }
// read_rotation_dir's error for the directory ("(no error)" when it loads).
std::string read_error(const fs::path& dir) {
  return error_of([&] { (void)read_rotation_dir(dir.string()); });
}

TEST(RotationIo, ReadsTorchFixtureWithManifest) {
  std::ifstream in(data_dir + "expected.json");
  const auto want = nlohmann::json::parse(in);
  const RotationSet rs = read_rotation_dir(data_dir + "rotation");
  EXPECT_EQ(rs.head_dim, 8);
  EXPECT_EQ(rs.group_size, 8);
  EXPECT_EQ(rs.sink_tokens, 4);
  EXPECT_EQ(rs.recent_tokens, 16);
  EXPECT_EQ(rs.k_objective, "qqt_r_h_pbr");
  EXPECT_EQ(rs.v_objective, "sst_r_h_pbr");
  EXPECT_EQ(rs.source_grouping, "layer");
  ASSERT_EQ(rs.layers.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    const LayerRotation& l = rs.layers[static_cast<size_t>(i)];
    EXPECT_EQ(l.layer, i);
    EXPECT_EQ(l.k_rotation, json_floats(want["tensors"][fmt::format("k.{}.rotation", i)]));
    EXPECT_EQ(l.v_rotation, json_floats(want["tensors"][fmt::format("v.{}.rotation", i)]));
    EXPECT_EQ(l.k_eigenvalues, json_floats(want["tensors"][fmt::format("k.{}.eigenvalues", i)]));
    EXPECT_EQ(l.v_eigenvalues, json_floats(want["tensors"][fmt::format("v.{}.eigenvalues", i)]));
    EXPECT_FLOAT_EQ(l.k_clip, 0.9f + 0.01f * static_cast<float>(i));
    EXPECT_FLOAT_EQ(l.v_clip, 0.8f + 0.01f * static_cast<float>(i));
  }
}

TEST(RotationIo, StringKeysUnknownKeysAndNoManifestGiveDefaults) {
  const RotationSet a = read_rotation_dir(data_dir + "rotation");
  const RotationSet b = read_rotation_dir(data_dir + "rotation_str_keys");
  ASSERT_EQ(b.layers.size(), 2u);
  EXPECT_EQ(b.group_size, 8);  // min(128, d)
  EXPECT_EQ(b.sink_tokens, 64);
  EXPECT_EQ(b.recent_tokens, 256);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(b.layers[i].k_rotation, a.layers[i].k_rotation);
    EXPECT_EQ(b.layers[i].v_rotation, a.layers[i].v_rotation);
    EXPECT_EQ(b.layers[i].k_clip, default_k_clip);
    EXPECT_EQ(b.layers[i].v_clip, default_v_clip);
  }
}

TEST(RotationIo, WriteReadRoundTrip) {
  TempDir t("roundtrip");
  RotationSet rs = sample_set(16, 3);
  rs.layers[1].v_rotation.clear();  // identity: written explicitly
  rs.layers[1].v_eigenvalues.clear();
  write_rotation_dir(rs, t.path.string(), {{"model", "tiny"}, {"tokens", 20000}});
  EXPECT_TRUE(fs::exists(t.path / "k_rotation_qqt_r_h_pbr.pt"));
  EXPECT_TRUE(fs::exists(t.path / "v_rotation_sst_r_h_pbr.pt"));
  const auto m = read_manifest(t.path);
  EXPECT_EQ(m["model"], "tiny");
  EXPECT_EQ(m["tokens"], 20000);
  EXPECT_EQ(m["group_size"], 8);
  EXPECT_EQ(m["layers"].size(), 3u);

  const RotationSet back = read_rotation_dir(t.path.string());
  EXPECT_EQ(back.head_dim, 16);
  EXPECT_EQ(back.group_size, 8);
  EXPECT_EQ(back.sink_tokens, 3);
  EXPECT_EQ(back.recent_tokens, 17);
  EXPECT_EQ(back.k_objective, rs.k_objective);
  EXPECT_EQ(back.v_objective, rs.v_objective);
  ASSERT_EQ(back.layers.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(back.layers[i].k_rotation, rs.layers[i].k_rotation) << i;
    EXPECT_EQ(back.layers[i].k_eigenvalues, rs.layers[i].k_eigenvalues) << i;
    EXPECT_EQ(back.layers[i].k_clip, rs.layers[i].k_clip) << i;
    EXPECT_EQ(back.layers[i].v_clip, rs.layers[i].v_clip) << i;
    if (i != 1) {
      EXPECT_EQ(back.layers[i].v_rotation, rs.layers[i].v_rotation) << i;
    }
  }
  std::vector<float> eye(256, 0.0f);
  for (int i = 0; i < 16; ++i) eye[static_cast<size_t>(i) * 17] = 1.0f;
  EXPECT_EQ(back.layers[1].v_rotation, eye);
  EXPECT_EQ(back.layers[1].v_eigenvalues, std::vector<float>(16, 1.0f));

  // Other objectives name other files; without a manifest they are still found.
  TempDir u("objectives");
  rs.k_objective = "ktk_r_h_pbr";
  rs.v_objective = "vtv_plain";
  write_rotation_dir(rs, u.path.string());
  fs::remove(u.path / "manifest.json");
  const RotationSet c = read_rotation_dir(u.path.string());
  EXPECT_EQ(c.k_objective, "ktk_r_h_pbr");
  EXPECT_EQ(c.v_objective, "vtv_plain");
  EXPECT_EQ(c.layers[2].k_rotation, rs.layers[2].k_rotation);
  EXPECT_EQ(c.layers[0].k_clip, default_k_clip);
  EXPECT_EQ(c.kv_layers, "");
}

TEST(RotationIo, KeyMeansRoundTripAndBadOnesAreRefused) {
  TempDir t("k_mean");
  RotationSet rs = sample_set(16, 3);
  rs.layers[0].k_mean.assign(32, 0.0f);  // two KV heads of 16
  for (size_t i = 0; i < 32; ++i) rs.layers[0].k_mean[i] = 0.37f * float(i) - 5.0f;
  write_rotation_dir(rs, t.path.string());
  const RotationSet back = read_rotation_dir(t.path.string());
  EXPECT_EQ(back.layers[0].k_mean, rs.layers[0].k_mean);
  EXPECT_TRUE(back.layers[1].k_mean.empty());  // optional per layer

  rs.layers[1].k_mean.assign(20, 1.0f);  // not a multiple of head_dim
  EXPECT_THROW(write_rotation_dir(rs, t.path.string()), Error);
  rs.layers[1].k_mean.assign(16, NAN);
  EXPECT_THROW(rs.validate(), Error);

  auto m = read_manifest(t.path);
  m["layers"][2]["k_mean"] = "not numbers";
  write_manifest(t.path, m);
  const std::string e = read_error(t.path);
  EXPECT_NE(e.find("k_mean"), std::string::npos) << e;
}

TEST(RotationIo, KeyScalesRoundTripAndBadOnesAreRefusedNamingTheLayer) {
  TempDir t("k_scale");
  RotationSet rs = sample_set(16, 3);
  rs.layers[1].k_scale.assign(32, 0.0f);  // two KV heads of 16
  for (size_t i = 0; i < 32; ++i) rs.layers[1].k_scale[i] = 0.25f + 0.11f * float(i);
  write_rotation_dir(rs, t.path.string());
  const RotationSet back = read_rotation_dir(t.path.string());
  EXPECT_EQ(back.layers[1].k_scale, rs.layers[1].k_scale);
  EXPECT_TRUE(back.layers[0].k_scale.empty());  // optional per layer

  auto refused = [&](std::vector<float> bad, const char* what) {
    RotationSet r = rs;
    r.layers[2].k_scale = std::move(bad);
    try {
      r.validate();
      ADD_FAILURE() << "expected an error for " << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("layer 2 k_scale"), std::string::npos) << e.what();
    }
  };
  refused(std::vector<float>(20, 1.0f), "a size not a multiple of head_dim");
  refused(std::vector<float>(16, 0.0f), "zero");
  refused(std::vector<float>(16, -1.0f), "negative");
  refused(std::vector<float>(16, NAN), "NaN");
  refused(std::vector<float>(16, INFINITY), "inf");

  auto m = read_manifest(t.path);
  m["layers"][0]["k_scale"] = std::vector<float>(16, -2.0f);
  write_manifest(t.path, m);
  const std::string e = read_error(t.path);
  EXPECT_NE(e.find("layer 0 k_scale"), std::string::npos) << e;
}

TEST(RotationIo, PerLayerKvTypesRoundTripAndBadOnesAreRefused) {
  TempDir t("kv_layers");
  RotationSet rs = sample_set(16, 3);
  rs.kv_layers = "0:int8,2:int4";
  rs.kv_budget_bits = 3.5;
  write_rotation_dir(rs, t.path.string());
  const RotationSet back = read_rotation_dir(t.path.string());
  EXPECT_EQ(back.kv_layers, "0:int8,2:int4");
  EXPECT_DOUBLE_EQ(back.kv_budget_bits, 3.5);

  // A hand-edited manifest naming a layer the rotations do not have is refused by name.
  auto m = read_manifest(t.path);
  m["kv_layers"] = "0-5:int4";
  write_manifest(t.path, m);
  const std::string e = read_error(t.path);
  EXPECT_NE(e.find("kv_layers"), std::string::npos) << e;
  m["kv_layers"] = 7;
  write_manifest(t.path, m);
  EXPECT_THROW(read_rotation_dir(t.path.string()), Error);
}

pt::Value layer_entry(int id, std::vector<int64_t> shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  std::vector<float> r(static_cast<size_t>(n), 0.0f);
  if (shape.size() == 2 && shape[0] == shape[1])
    for (int64_t i = 0; i < shape[0]; ++i) r[static_cast<size_t>(i * shape[0] + i)] = 1.0f;
  pt::Value e = pt::Value::dict();
  e.set(pt::Value::string("layer_id"), pt::Value::integer(id));
  e.set(pt::Value::string("rotation"), pt::Value::tensor(pt::Tensor::from_f32(r, shape)));
  return e;
}

void write_file(const fs::path& p, std::vector<std::pair<int, pt::Value>> layers) {
  pt::Value l = pt::Value::dict();
  for (auto& [i, v] : layers) l.set(pt::Value::integer(i), v);
  pt::Value root = pt::Value::dict();
  root.set(pt::Value::string("layers"), l);
  pt::save(root, p.string());
}

TEST(RotationIo, ErrorsNameFileAndLayer) {
  TempDir t("errors");
  const fs::path k = t.path / "k_rotation_qqt_r_h_pbr.pt", v = t.path / "v_rotation_sst_r_h_pbr.pt";
  write_file(v, {{0, layer_entry(0, {8, 8})}, {1, layer_entry(1, {8, 8})}});

  write_file(k, {{0, layer_entry(0, {8, 8})}, {1, layer_entry(1, {8, 4})}});
  std::string e = error_of([&] { (void)read_rotation_dir(t.path.string()); });
  EXPECT_NE(e.find(k.string() + ": layer 1: 'rotation' has shape [8, 4], expected [8, 8]"), std::string::npos) << e;

  write_file(k, {{0, layer_entry(0, {8, 8})}, {2, layer_entry(2, {8, 8})}});
  e = error_of([&] { (void)read_rotation_dir(t.path.string()); });
  EXPECT_NE(e.find("layer 1 is missing"), std::string::npos) << e;

  write_file(k, {{0, layer_entry(0, {8, 8})}});
  e = error_of([&] { (void)read_rotation_dir(t.path.string()); });
  EXPECT_NE(e.find("1 K layers but v_rotation_sst_r_h_pbr.pt has 2 V layers"), std::string::npos) << e;

  write_file(k, {{0, layer_entry(0, {8, 8})}, {1, layer_entry(3, {8, 8})}});
  e = error_of([&] { (void)read_rotation_dir(t.path.string()); });
  EXPECT_NE(e.find("layer 1 has layer_id 3"), std::string::npos) << e;

  // Not orthogonal: validate() names the layer.
  pt::Value bad = layer_entry(1, {8, 8});
  bad.set(pt::Value::string("rotation"), pt::Value::tensor(pt::Tensor::from_f32(std::vector<float>(64, 0.5f), {8, 8})));
  write_file(k, {{0, layer_entry(0, {8, 8})}, {1, bad}});
  e = error_of([&] { (void)read_rotation_dir(t.path.string()); });
  EXPECT_NE(e.find("layer 1 k_rotation is not orthogonal"), std::string::npos) << e;

  write_file(k, {{0, layer_entry(0, {8, 8})}, {1, layer_entry(1, {8, 8})}});
  std::ofstream(t.path / "manifest.json") << R"({"group_size": 3})";
  e = error_of([&] { (void)read_rotation_dir(t.path.string()); });
  EXPECT_NE(e.find("group_size 3"), std::string::npos) << e;
  std::ofstream(t.path / "manifest.json") << R"({"layers": [{"layer": 5, "k_clip": 0.5}]})";
  e = error_of([&] { (void)read_rotation_dir(t.path.string()); });
  EXPECT_NE(e.find("layer 5 is not among the 2 layers"), std::string::npos) << e;
  std::ofstream(t.path / "manifest.json") << "{not json";
  e = error_of([&] { (void)read_rotation_dir(t.path.string()); });
  EXPECT_NE(e.find("manifest.json: invalid JSON"), std::string::npos) << e;
  fs::remove(t.path / "manifest.json");
  EXPECT_NO_THROW((void)read_rotation_dir(t.path.string()));

  e = error_of([&] { (void)read_rotation_dir((t.path / "nope").string()); });
  EXPECT_NE(e.find("not a directory"), std::string::npos) << e;
  RotationSet rs = sample_set(16, 1);
  rs.layers[0].k_clip = 1.5f;
  e = error_of([&] { write_rotation_dir(rs, (t.path / "w").string()); });
  EXPECT_NE(e.find("k_clip"), std::string::npos) << e;
}

TEST(RotationIo, TorchLoadsWrittenDirectory) {
  const std::string script = std::string(OSCAR_SOURCE_DIR) + "/tests/reference/torch_cpu.sh";
  if (std::system(("bash " + script + " available").c_str()) != 0)
    GTEST_SKIP() << "torch not installed (tests/reference/torch_cpu.sh install)";
  TempDir t("torch");
  write_rotation_dir(sample_set(16, 2), t.path.string());
  const std::string cmd = fmt::format("bash {} python {}/tests/reference/check_pt_roundtrip.py --rotation-dir {}", script,
                                      OSCAR_SOURCE_DIR, t.path.string());
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
}

// The manifest names its .pt files by name within the directory: a path elsewhere, a
// parent, a directory or a device is refused naming the key (a device such as /dev/zero
// would otherwise be read without end).
TEST(RotationIo, ManifestFileNamesStayInTheDirectory) {
  TempDir t("file_names");
  write_rotation_dir(sample_set(16, 2), t.path.string());
  const auto good = read_manifest(t.path);
  fs::create_directories(t.path / "sub");
  for (const std::string bad : {"/dev/zero", "../k_rotation_qqt_r_h_pbr.pt", "..", "", "sub", "sub/x.pt"}) {
    auto m = good;
    m["k_file"] = bad;
    write_manifest(t.path, m);
    const std::string e = read_error(t.path);
    EXPECT_NE(e.find("k_file"), std::string::npos) << "k_file \"" << bad << "\": " << e;
  }
  write_manifest(t.path, good);
  EXPECT_EQ(read_rotation_dir(t.path.string()).layers.size(), 2u);
}

// An integer field given as a float (1e300 was undefined behaviour in the conversion, found by
// fuzz_rotation_manifest), as an integer out of int's range, or as a fraction is refused by
// name; the same value as a whole integer still loads.
TEST(RotationIo, IntegerFieldsMustBeIntegersInRange) {
  TempDir t("int_fields");
  write_rotation_dir(sample_set(16, 2), t.path.string());
  const auto original = read_manifest(t.path);
  for (const char* key : {"sink_tokens", "recent_tokens", "group_size"}) {
    for (const nlohmann::json& bad : {nlohmann::json(1e300), nlohmann::json(3.5), nlohmann::json(int64_t(1) << 40),
                                      nlohmann::json(uint64_t(1) << 63)}) {
      auto m = original;
      m[key] = bad;
      write_manifest(t.path, m);
      const std::string e = read_error(t.path);
      EXPECT_NE(e.find(std::string("'") + key + "' must be an integer"), std::string::npos) << key << " = " << bad << ": " << e;
    }
  }
  auto m = original;
  m["layers"][1]["layer"] = 6.0e70;
  write_manifest(t.path, m);
  const std::string e = read_error(t.path);
  EXPECT_NE(e.find("'layer' must be an integer"), std::string::npos) << e;
  m = original;
  m["sink_tokens"] = 3;  // the value written, as an integer
  write_manifest(t.path, m);
  EXPECT_EQ(read_error(t.path), "(no error)");
}

}  // namespace
}  // namespace oscar
