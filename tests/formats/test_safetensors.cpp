// Safetensors reader: the fixture written by the `safetensors` package reads back
// exactly; corrupt images (built in memory) raise oscar::Error and never crash.
#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "oscar/core/error.h"
#include "oscar/formats/safetensors.h"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace oscar::safetensors;

namespace {

const std::string fixture_dir = std::string(OSCAR_SOURCE_DIR) + "/tests/data/tiny_llama_st";

std::vector<uint8_t> image(const std::string& header, const std::vector<uint8_t>& data = {}) {
  // One allocation and memcpy: GCC 12 misreads vector::insert here (-Warray-bounds).
  std::vector<uint8_t> out(8 + header.size() + data.size());
  const uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  if (!header.empty()) std::memcpy(out.data() + 8, header.data(), header.size());
  if (!data.empty()) std::memcpy(out.data() + 8 + header.size(), data.data(), data.size());
  return out;
}

std::vector<uint8_t> f32_bytes(std::initializer_list<float> v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.begin(), b.size());
  return b;
}

SafetensorsFile parse(const std::vector<uint8_t>& img) {
  return SafetensorsFile::parse(img.data(), img.size(), "mem.safetensors");
}

// Expects oscar::Error whose message contains every one of `needles`.
void expect_error(const std::vector<uint8_t>& img, std::initializer_list<const char*> needles) {
  try {
    parse(img);
    ADD_FAILURE() << "no error";
  } catch (const oscar::Error& e) {
    for (const char* n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
  }
}

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

void write_file(const fs::path& p, const std::vector<uint8_t>& b) {
  std::ofstream f(p, std::ios::binary);
  f.write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
}

struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& tag) {
    path = fs::temp_directory_path() / ("oscar_st_" + tag + "_" + std::to_string(::getpid()));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

// A valid two-tensor image: a [2,3] F32 and a [2] BF16.
const std::string good_header =
    R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
    R"("b":{"dtype":"BF16","shape":[2],"data_offsets":[24,28]}})";
std::vector<uint8_t> good_data() {
  auto d = f32_bytes({1, 2, 3, -4, 5.5f, 0.25f});
  for (uint8_t x : {0x80, 0x3f, 0x20, 0xc0}) d.push_back(x);  // bf16 1.0, -2.5
  return d;
}

}  // namespace

TEST(Safetensors, ParsesTensorsAndMetadata) {
  const auto img = image(good_header, good_data());
  const auto f = parse(img);
  ASSERT_EQ(f.tensors().size(), 2u);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  const auto& a = f.tensor("a");
  EXPECT_EQ(a.dtype, Dtype::f32);
  EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(a.n_elements, 6u);
  EXPECT_EQ(f.load_f32(a), (std::vector<float>{1, 2, 3, -4, 5.5f, 0.25f}));
  EXPECT_EQ(f.load_f32(f.tensor("b")), (std::vector<float>{1.0f, -2.5f}));
  EXPECT_EQ(f.find_tensor("missing"), nullptr);
  EXPECT_THROW(f.tensor("missing"), oscar::Error);
}

TEST(Safetensors, ScalarsEmptyTensorsAndUnalignedData) {
  // A scalar (shape []), an empty tensor, and an F32 at an odd offset.
  const std::string h =
      R"({"s":{"dtype":"U8","shape":[],"data_offsets":[0,1]},"e":{"dtype":"F32","shape":[0,5],"data_offsets":[1,1]},)"
      R"("x":{"dtype":"F32","shape":[1],"data_offsets":[1,5]}})";
  auto d = std::vector<uint8_t>{7};
  const auto x = f32_bytes({3.5f});
  d.insert(d.end(), x.begin(), x.end());
  const auto img = image(h, d);  // must outlive the parsed view
  const auto f = parse(img);
  EXPECT_EQ(f.tensor("s").n_elements, 1u);
  EXPECT_TRUE(f.load_f32(f.tensor("e")).empty());
  EXPECT_EQ(f.load_f32(f.tensor("x")), std::vector<float>{3.5f});
  // U8 is listed but is not a float type.
  EXPECT_THROW(f.load_f32(f.tensor("s")), oscar::Error);
}

TEST(Safetensors, NonFloatDtypeRefusedOnLoadNamingIt) {
  const auto img = image(R"({"ids":{"dtype":"I32","shape":[1],"data_offsets":[0,4]}})", {1, 0, 0, 0});
  const auto f = parse(img);
  try {
    f.load_f32(f.tensor("ids"));
    FAIL() << "I32 loaded as float";
  } catch (const oscar::Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("ids"), std::string::npos) << msg;
    EXPECT_NE(msg.find("I32"), std::string::npos) << msg;
    EXPECT_NE(msg.find("mem.safetensors"), std::string::npos) << msg;
  }
}

TEST(Safetensors, FixtureMatchesPythonWriter) {
  const auto f = SafetensorsFile::open(fixture_dir + "/model.safetensors");
  std::ifstream ef(fixture_dir + "/expected.json");
  const json expected = json::parse(ef);
  EXPECT_EQ(f.metadata().at("note"), expected["metadata"]["note"].get<std::string>());
  ASSERT_EQ(f.tensors().size(), expected["tensors"].size());
  for (const auto& [name, e] : expected["tensors"].items()) {
    SCOPED_TRACE(name);
    const auto& t = f.tensor(name);
    EXPECT_EQ(dtype_name(t.dtype), e["dtype"].get<std::string>());
    EXPECT_EQ(t.shape, e["shape"].get<std::vector<int64_t>>());
    const auto got = f.load_f32(t);
    const auto want = e["values"].get<std::vector<double>>();
    ASSERT_EQ(got.size(), want.size());
    // Exact, bit for bit (signed zero and subnormals included).
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(float(want[i]))) << "element " << i;
  }
}

TEST(Safetensors, EveryTruncationOfTheFixtureThrows) {
  const auto full = read_file(fixture_dir + "/model.safetensors");
  ASSERT_GT(full.size(), 1000u);
  for (size_t n = 0; n < full.size(); ++n) {
    // An exact-size copy, so a sanitizer build would catch any read past the end.
    const std::vector<uint8_t> cut(full.begin(), full.begin() + std::ptrdiff_t(n));
    EXPECT_THROW(SafetensorsFile::parse(cut.data(), cut.size(), "cut"), oscar::Error) << "length " << n;
  }
}

TEST(Safetensors, HeaderLengthOutOfRange) {
  auto img = image(good_header, good_data());
  const uint64_t past = img.size();  // one header length that runs past the end
  std::memcpy(img.data(), &past, 8);
  expect_error(img, {"mem.safetensors", "past the end"});
  const uint64_t huge = ~0ull;
  std::memcpy(img.data(), &huge, 8);
  expect_error(img, {"limit"});
  const uint64_t over_limit = max_header_bytes + 1;
  std::memcpy(img.data(), &over_limit, 8);
  expect_error(img, {"limit"});
}

TEST(Safetensors, BadJsonAndBadStructure) {
  expect_error(image("{\"a\": "), {"mem.safetensors", "JSON"});
  expect_error(image("not json at all"), {"JSON"});
  expect_error(image("[1,2,3]"), {"object"});
  expect_error(image(R"({"a": 5})"), {"'a'", "object"});
  expect_error(image(R"({"a":{"shape":[1],"data_offsets":[0,4]}})", {0, 0, 0, 0}), {"'a'", "dtype"});
  expect_error(image(R"({"a":{"dtype":"F32","data_offsets":[0,4]}})", {0, 0, 0, 0}), {"'a'", "shape"});
  expect_error(image(R"({"a":{"dtype":"F32","shape":[1]}})", {0, 0, 0, 0}), {"'a'", "data_offsets"});
  expect_error(image(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", {0, 0, 0, 0}), {"data_offsets"});
  expect_error(image(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", {0, 0, 0, 0}), {"'a'", "shape"});
  expect_error(image(R"({"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", {0, 0, 0, 0}), {"shape"});
  expect_error(image(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,"4"]}})", {0, 0, 0, 0}), {"data_offsets"});
  expect_error(image(R"({"__metadata__":{"k":1}})"), {"__metadata__"});
  expect_error(image(R"({"__metadata__":[]})"), {"__metadata__"});
}

TEST(Safetensors, OffsetsOutOfRangeOrInconsistent) {
  const std::vector<uint8_t> four(4, 0);
  expect_error(image(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", four), {"'w'", "past the data"});
  expect_error(image(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})", four), {"'w'", "reversed"});
  // dtype x shape disagrees with the byte range.
  expect_error(image(R"({"w":{"dtype":"F16","shape":[1],"data_offsets":[0,4]}})", four), {"'w'", "F16"});
  expect_error(image(R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,4]}})", four), {"'w'", "needs 16"});
  // Element count and byte size that overflow 64 bits.
  expect_error(image(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}})", four),
               {"'w'", "overflow"});
  expect_error(image(R"({"w":{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,4]}})", four),
               {"'w'", "overflow"});
  expect_error(image(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,18446744073709551615]}})", four), {"'w'"});
}

TEST(Safetensors, UnknownDtypeDuplicateNamesAndOverlap) {
  const std::vector<uint8_t> eight(8, 0);
  expect_error(image(R"({"q":{"dtype":"Q4_0","shape":[1],"data_offsets":[0,4]}})", eight), {"'q'", "Q4_0"});
  expect_error(image(R"({"q":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"q":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                     eight),
               {"'q'", "twice"});
  expect_error(image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                     eight),
               {"overlap"});
}

TEST(Safetensors, RandomCorruptionNeverCrashes) {
  const auto full = read_file(fixture_dir + "/model.safetensors");
  uint64_t header_len = 0;
  std::memcpy(&header_len, full.data(), 8);
  std::mt19937_64 rng(7);
  int parsed = 0, rejected = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    auto img = full;
    // Corrupt the header (where all the structure is): flip, overwrite or insert-shift bytes.
    const int edits = 1 + int(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      const size_t at = rng() % (8 + header_len);
      img[at] = uint8_t(rng() % 3 == 0 ? "{}[]\",:0123456789-e"[rng() % 19] : rng());
    }
    try {
      const auto f = SafetensorsFile::parse(img.data(), img.size(), "fuzz");
      for (const auto& t : f.tensors()) {
        try {
          f.load_f32(t);
        } catch (const oscar::Error&) {
        }
      }
      ++parsed;
    } catch (const oscar::Error&) {
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 0);
  EXPECT_EQ(parsed + rejected, 3000);
}

TEST(SafetensorsModel, SingleFileAndDirectoryOfShards) {
  TempDir dir("shards");
  write_file(dir.path / "model-00001-of-00002.safetensors",
             image(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", f32_bytes({1.5f})));
  write_file(dir.path / "model-00002-of-00002.safetensors",
             image(R"({"y":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", f32_bytes({2, 3})));
  write_file(dir.path / "notes.txt", {'h', 'i'});

  const auto one = SafetensorsModel::open((dir.path / "model-00002-of-00002.safetensors").string());
  EXPECT_EQ(one.tensor_names(), std::vector<std::string>{"y"});

  // No index: every *.safetensors file in the directory.
  const auto all = SafetensorsModel::open(dir.path.string());
  EXPECT_EQ(all.shards().size(), 2u);
  EXPECT_EQ(all.tensor_names(), (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(all.load_f32("x"), std::vector<float>{1.5f});
  EXPECT_EQ(all.load_f32("y"), (std::vector<float>{2, 3}));
  EXPECT_THROW(all.load_f32("z"), oscar::Error);
}

TEST(SafetensorsModel, IndexJsonNamesTheShards) {
  TempDir dir("index");
  write_file(dir.path / "a.safetensors", image(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", f32_bytes({1})));
  write_file(dir.path / "b.safetensors", image(R"({"y":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", f32_bytes({2})));
  // A stray file the index does not mention is not opened.
  write_file(dir.path / "stray.safetensors", {1, 2, 3});
  auto write_index = [&](const std::string& s) {
    std::ofstream(dir.path / "model.safetensors.index.json") << s;
  };
  write_index(R"({"metadata":{"total_size":8},"weight_map":{"x":"a.safetensors","y":"b.safetensors"}})");
  const auto m = SafetensorsModel::open(dir.path.string());
  EXPECT_EQ(m.tensor_names(), (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(m.load_f32("y"), std::vector<float>{2});

  write_index(R"({"weight_map":{"x":"b.safetensors"}})");  // wrong shard for x
  EXPECT_THROW(SafetensorsModel::open(dir.path.string()), oscar::Error);
  write_index(R"({"weight_map":{"x":"missing.safetensors"}})");
  EXPECT_THROW(SafetensorsModel::open(dir.path.string()), oscar::Error);
  write_index(R"({"weight_map":{"x":"../a.safetensors"}})");
  EXPECT_THROW(SafetensorsModel::open(dir.path.string()), oscar::Error);
  write_index(R"({"weight_map":{}})");
  EXPECT_THROW(SafetensorsModel::open(dir.path.string()), oscar::Error);
  write_index(R"({"weight_map":)");
  EXPECT_THROW(SafetensorsModel::open(dir.path.string()), oscar::Error);
}

TEST(SafetensorsModel, DuplicateTensorAcrossShardsOrEmptyDirectory) {
  TempDir dir("dup");
  EXPECT_THROW(SafetensorsModel::open(dir.path.string()), oscar::Error);  // no shards
  const auto x = image(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", f32_bytes({1}));
  write_file(dir.path / "a.safetensors", x);
  write_file(dir.path / "b.safetensors", x);
  try {
    SafetensorsModel::open(dir.path.string());
    FAIL() << "duplicate accepted";
  } catch (const oscar::Error& e) {
    EXPECT_NE(std::string(e.what()).find("'x'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(SafetensorsModel::open((dir.path / "nope.safetensors").string()), oscar::Error);
}
