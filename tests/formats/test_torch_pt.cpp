// .pt reader and writer: fixtures made by real torch.save (tests/reference/
// make_pt_fixtures.py), hostile files, in-memory pickles that push every bound, and
// the writer's output read back by us and (when tests/reference/torch_cpu.sh has
// installed torch) by torch.load(weights_only=True).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <unistd.h>

#include "oscar/core/dtype.h"
#include "oscar/core/error.h"
#include "oscar/formats/torch_pt.h"
#include "oscar/formats/zip_archive.h"

namespace oscar::pt {
namespace {

const std::string data_dir = std::string(OSCAR_SOURCE_DIR) + "/tests/data/pt/";

nlohmann::json expected() {
  std::ifstream in(data_dir + "expected.json");
  return nlohmann::json::parse(in);
}

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

// Every element as a double, whatever the dtype (the fixture lists values as float64).
std::vector<double> as_doubles(const Tensor& t) {
  const size_t n = static_cast<size_t>(t.numel()), es = dtype_size(t.dtype);
  EXPECT_EQ(t.data.size(), n * es);
  std::vector<double> out(n);
  for (size_t i = 0; i < n; ++i) {
    const uint8_t* p = t.data.data() + i * es;
    auto get = [&](auto x) { std::memcpy(&x, p, sizeof x); return x; };
    switch (t.dtype) {
      case Dtype::f32: out[i] = get(float{}); break;
      case Dtype::f64: out[i] = get(double{}); break;
      case Dtype::f16: out[i] = fp16_to_f32(fp16{get(uint16_t{})}); break;
      case Dtype::bf16: out[i] = bf16_to_f32(bf16{get(uint16_t{})}); break;
      case Dtype::i64: out[i] = static_cast<double>(get(int64_t{})); break;
      case Dtype::i32: out[i] = get(int32_t{}); break;
      case Dtype::i16: out[i] = get(int16_t{}); break;
      case Dtype::i8: out[i] = get(int8_t{}); break;
      case Dtype::u8: case Dtype::boolean: out[i] = get(uint8_t{}); break;
      case Dtype::u16: out[i] = get(uint16_t{}); break;
      case Dtype::u32: out[i] = get(uint32_t{}); break;
      default: ADD_FAILURE() << "dtype " << dtype_name(t.dtype);
    }
  }
  return out;
}

void expect_tensor(const Value& v, const nlohmann::json& want, const std::string& what) {
  SCOPED_TRACE(what);
  ASSERT_TRUE(v.is_tensor()) << v.kind_name();
  const Tensor& t = v.as_tensor();
  EXPECT_EQ(dtype_name(t.dtype), want["dtype"].get<std::string>());
  EXPECT_EQ(t.shape, want["shape"].get<std::vector<int64_t>>());
  EXPECT_EQ(as_doubles(t), want["values"].get<std::vector<double>>());
}

TEST(TorchPt, ReadsEveryValueType) {
  const Value v = load(data_dir + "values.pt");
  const auto want = expected();
  ASSERT_TRUE(v.is_dict());
  EXPECT_FALSE(v.ordered());
  EXPECT_TRUE(v.at("none").is_none());
  EXPECT_TRUE(v.at("true").as_bool());
  EXPECT_FALSE(v.at("false").as_bool());
  const std::vector<int64_t> ints = {0, 1, 255, 256, 65535, 65536, -1, -256, 2147483647, -2147483648ll,
                                     2147483648ll, 1ll << 40, -(1ll << 40), INT64_MAX, INT64_MIN};
  ASSERT_EQ(v.at("ints").size(), ints.size());
  for (size_t i = 0; i < ints.size(); ++i) EXPECT_EQ(v.at("ints").items()[i].as_int(), ints[i]) << i;
  const auto& f = v.at("floats").items();
  ASSERT_EQ(f.size(), 6u);
  EXPECT_EQ(f[0].as_double(), 1.5);
  EXPECT_TRUE(f[1].as_double() == 0.0 && std::signbit(f[1].as_double()));
  EXPECT_EQ(f[2].as_double(), 1e300);
  EXPECT_EQ(f[3].as_double(), -2.5e-310);
  EXPECT_EQ(f[4].as_double(), INFINITY);
  EXPECT_EQ(f[5].as_double(), -INFINITY);
  EXPECT_TRUE(std::isnan(v.at("nan").as_double()));
  const auto& s = v.at("strings").items();
  ASSERT_EQ(s.size(), 4u);
  EXPECT_EQ(s[0].as_string(), "");
  EXPECT_EQ(s[1].as_string(), "plain");
  EXPECT_EQ(s[2].as_string(), "h\xc3\xa9llo \xe2\x98\x83 \xf0\x9f\x98\x80");
  EXPECT_EQ(s[3].as_string(), std::string(300, 'x'));
  const auto& t = v.at("tuples").items();
  ASSERT_EQ(t.size(), 5u);
  for (size_t i = 0; i < t.size(); ++i) EXPECT_EQ(t[i].kind(), Value::Kind::tuple);
  EXPECT_EQ(t[0].size(), 0u);
  EXPECT_EQ(t[2].items()[1].as_string(), "a");
  EXPECT_TRUE(t[3].items()[2].is_none());
  EXPECT_EQ(t[4].items()[4].as_int(), 5);
  const Value& nested = v.at("nested");
  EXPECT_EQ(nested.at("list").items()[1].items()[1].items()[1].items()[0].as_int(), 3);
  EXPECT_EQ(nested.at("dict").at("a").at("b").at("c").as_int(), 1);
  const Value& ik = v.at("int_keys");
  EXPECT_EQ(ik.find(3)->as_string(), "three");
  EXPECT_EQ(ik.find(-1)->as_string(), "minus one");
  EXPECT_EQ(ik.find(1000000)->as_string(), "million");
  EXPECT_EQ(ik.find(4), nullptr);
  const Value& od = v.at("ordered");
  EXPECT_TRUE(od.ordered());
  ASSERT_EQ(od.size(), 3u);
  EXPECT_EQ(od.keys()[0].as_string(), "z");
  EXPECT_EQ(od.keys()[1].as_string(), "a");
  EXPECT_EQ(od.values()[2].as_int(), 3);
  expect_tensor(v.at("scalar_tensor"), want["tensors"]["values.scalar_tensor"], "scalar_tensor");
  EXPECT_TRUE(v.at("scalar_tensor").as_tensor().shape.empty());
  expect_tensor(v.at("tensor_in_list").items()[0], want["tensors"]["values.tensor_in_list"], "tensor_in_list");
  // Accessors name what they expected.
  try {
    (void)v.at("ints").as_int();
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expected int, got list"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)v.at("no such key"), Error);
}

TEST(TorchPt, ReadsStateDictWithViewsAndDtypes) {
  const Value sd = load(data_dir + "state_dict.pt");
  const auto want = expected();
  ASSERT_TRUE(sd.is_dict());
  EXPECT_TRUE(sd.ordered());
  const auto keys = want["state_dict_keys"].get<std::vector<std::string>>();
  ASSERT_EQ(sd.size(), keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(sd.keys()[i].as_string(), keys[i]);
    expect_tensor(sd.values()[i], want["tensors"]["state_dict." + keys[i]], keys[i]);
  }
  // The views keep their file geometry; the data is the gathered view.
  const Tensor& tr = sd.at("transposed").as_tensor();
  EXPECT_EQ(tr.strides, (std::vector<int64_t>{1, 6}));
  const Tensor& off = sd.at("offset_view").as_tensor();
  EXPECT_EQ(off.storage_offset, 8);
  EXPECT_EQ(off.to_f32()[0], 1.0f);  // base[1][2] = 8 / 8
  EXPECT_EQ(sd.at("u16").as_tensor().dtype, Dtype::u16);  // _rebuild_tensor_v3 + UntypedStorage
  EXPECT_TRUE(sd.at("param").as_tensor().requires_grad);  // _rebuild_parameter
  EXPECT_FALSE(sd.at("base").as_tensor().requires_grad);
  EXPECT_EQ(sd.at("empty").as_tensor().numel(), 0);
  EXPECT_THROW((void)sd.at("i64").as_tensor().to_f32(), Error);  // no silent int → float
}

TEST(TorchPt, ReadsRotationZooFile) {
  const Value k = load(data_dir + "rotation/k_rotation_qqt_r_h_pbr.pt");
  const auto want = expected();
  EXPECT_EQ(k.at("format_version").as_int(), 1);
  EXPECT_EQ(k.at("objective").as_string(), "qqt_r_h_pbr");
  EXPECT_EQ(k.at("source_grouping").as_string(), "layer");
  const Value& layers = k.at("layers");
  ASSERT_EQ(layers.size(), 2u);
  for (int64_t i = 0; i < 2; ++i) {
    const Value* l = layers.find(i);
    ASSERT_NE(l, nullptr);
    EXPECT_EQ(l->at("layer_id").as_int(), i);
    expect_tensor(l->at("rotation"), want["tensors"][fmt::format("k.{}.rotation", i)], "rotation");
    expect_tensor(l->at("eigenvalues"), want["tensors"][fmt::format("k.{}.eigenvalues", i)], "eigenvalues");
  }
  const Value s = load(data_dir + "rotation_str_keys/v_rotation_sst_r_h_pbr.pt");
  EXPECT_NE(s.at("layers").find("1"), nullptr);
}

TEST(TorchPt, RefusesHostileFiles) {
  const auto want = expected();
  ASSERT_GE(want["hostile"].size(), 10u);
  for (const auto& [name, reason] : want["hostile"].items()) {
    SCOPED_TRACE(name);
    const std::string path = data_dir + "hostile/" + name;
    try {
      (void)load(path);
      ADD_FAILURE() << name << " loaded";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(reason.get<std::string>()), std::string::npos) << msg;
      EXPECT_NE(msg.find(path), std::string::npos) << msg;
    }
  }
  try {
    (void)load(data_dir + "hostile/global_os_system.pt");
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("refusing to load: pickle references 'os.system'"), std::string::npos)
        << e.what();
  }
}

// An entry whose path would leave the archive's folder is refused by name (and the archive
// opened before the check is released: the fuzz target's leak check found it was not).
TEST(TorchPt, RefusesEntriesOutsideTheArchive) {
  const std::vector<uint8_t> pkl = {0x80, 0x02, 'N', '.'};
  for (const std::string bad : {"archive/../../x.pkl", "/abs/data.pkl", "../data.pkl", "a/..", "a\\..\\b"}) {
    SCOPED_TRACE(bad);
    const std::vector<uint8_t> image =
        zip::write_stored({{bad, std::span<const uint8_t>(pkl)}, {"archive/data.pkl", std::span<const uint8_t>(pkl)}}, 64);
    try {
      (void)load_bytes(image, "traversal.pt");
      ADD_FAILURE() << "loaded";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("has a path outside the archive"), std::string::npos) << e.what();
    }
  }
}

// Every prefix of a real file, and random byte corruptions, either load or throw
// oscar::Error: never crash (run under the sanitizer build to catch the rest).
TEST(TorchPt, TruncatedAndCorruptImagesNeverCrash) {
  const std::vector<uint8_t> whole = read_file(data_dir + "state_dict.pt");
  ASSERT_GT(whole.size(), 1000u);
  for (size_t n = 0; n < whole.size(); n += (n < 200 ? 1 : 7)) {
    std::vector<uint8_t> part(whole.begin(), whole.begin() + static_cast<std::ptrdiff_t>(n));
    EXPECT_THROW((void)load_bytes(part, "prefix"), Error) << n;
  }
  std::mt19937 rng(7);
  int loaded = 0;
  for (int trial = 0; trial < 400; ++trial) {
    std::vector<uint8_t> bad = whole;
    for (int k = 0; k < 3; ++k) bad[rng() % bad.size()] ^= static_cast<uint8_t>(1u << (rng() % 8));
    try {
      (void)load_bytes(bad, "corrupt");
      ++loaded;
    } catch (const Error&) {
    }
  }
  SUCCEED() << loaded << " of 400 corrupted images still loaded";
}

// ---- the pickle layer in memory ------------------------------------------------

struct NoStorages : StorageSource {
  std::shared_ptr<const std::vector<uint8_t>> storage_bytes(const std::string& key) override {
    fail("no storage '{}'", key);
  }
};

std::string unpickle_error(const std::string& p, const Limits& lim = {}) {
  NoStorages none;
  try {
    (void)unpickle(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(p.data()), p.size()), none, lim);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(TorchPt, PickleBounds) {
  using namespace std::string_literals;
  const std::string P = "\x80\x02";
  Limits lim;
  lim.max_stack = 1000;
  EXPECT_NE(unpickle_error(P + std::string(5000, '('), lim).find("marks"), std::string::npos);
  EXPECT_NE(unpickle_error(P + std::string(5000, 'N'), lim).find("stack deeper"), std::string::npos);
  // A list containing itself.
  EXPECT_NE(unpickle_error(P + "]q\x00h\x00" "a."s).find("cycle"), std::string::npos);
  // Nesting deeper than max_depth.
  std::string deep = P;
  for (int i = 0; i < 600; ++i) deep += "]";
  for (int i = 0; i < 599; ++i) deep += "a";
  deep += ".";
  EXPECT_NE(unpickle_error(deep).find("nested deeper"), std::string::npos);
  // "Billion laughs": each level a pair of references to the level below.
  std::string laughs = P + "]";
  for (int i = 0; i < 40; ++i) laughs += "q\x00" "0(h\x00h\x00l"s;
  laughs += ".";
  Limits few;
  few.max_values = 100000;
  EXPECT_NE(unpickle_error(laughs, few).find("more than 100000 values"), std::string::npos);
  EXPECT_NE(unpickle_error(P + "h\x05.").find("never PUT"), std::string::npos);
  EXPECT_NE(unpickle_error(P + "K\x01K\x02R.").find("REDUCE of a int"), std::string::npos);
  EXPECT_NE(unpickle_error(P + "]N" "b.").find("BUILD on a list"), std::string::npos);
  EXPECT_NE(unpickle_error(P + "\x8a\x09" + std::string(9, '\x01') + ".").find("int64"), std::string::npos);
  EXPECT_NE(unpickle_error(P + "}(]K\x01u.").find("dict key of type list"), std::string::npos);
  EXPECT_NE(unpickle_error(P + "K\x01K\x02.").find("STOP with 2"), std::string::npos);
  EXPECT_NE(unpickle_error("\x80\x07N.").find("protocol 7"), std::string::npos);
  EXPECT_NE(unpickle_error(P + "ctorch\nFloatStorage\n.").find("bare global"), std::string::npos);
  EXPECT_NE(unpickle_error(P + "c__builtin__\nset\n)R.").find("'__builtin__.set'"), std::string::npos);
  EXPECT_NE(unpickle_error(P + "\x8c\x0ctorch._utils\x8c\x04" "eval\x93.").find("'torch._utils.eval'"),
            std::string::npos);
  // LONG1 sign extension and BINFLOAT.
  NoStorages none;
  const std::string ok = P + "(\x8a\x02\x00\xff\x8a\x01\xff\x8a\x00G\x3f\xf8\x00\x00\x00\x00\x00\x00t."s;
  const Value v = unpickle(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(ok.data()), ok.size()), none);
  ASSERT_EQ(v.size(), 4u);
  EXPECT_EQ(v.items()[0].as_int(), -256);  // 0xff00 as int16
  EXPECT_EQ(v.items()[1].as_int(), -1);
  EXPECT_EQ(v.items()[2].as_int(), 0);
  EXPECT_EQ(v.items()[3].as_double(), 1.5);
}

// ---- writer --------------------------------------------------------------------

Value sample_value() {
  Value v = Value::dict();
  v.set(Value::string("none"), Value());
  v.set(Value::string("flags"), Value::list({Value::boolean(true), Value::boolean(false)}));
  Value ints = Value::list();
  for (int64_t i : {int64_t{0}, int64_t{255}, int64_t{256}, int64_t{65535}, int64_t{65536}, int64_t{-1},
                    int64_t{-129}, int64_t{-32769}, int64_t{INT32_MAX}, int64_t{INT32_MIN}, int64_t{1} << 31,
                    -(int64_t{1} << 31) - 1, int64_t{1} << 40, int64_t{-1} << 55, INT64_MAX, INT64_MIN})
    ints.push_back(Value::integer(i));
  v.set(Value::string("ints"), ints);
  v.set(Value::string("floats"), Value::list({Value::real(1.5), Value::real(-0.0), Value::real(1e-310),
                                              Value::real(INFINITY), Value::real(NAN)}));
  v.set(Value::string("str"), Value::string("h\xc3\xa9llo \xe2\x98\x83"));
  v.set(Value::string("tuples"), Value::list({Value::tuple(), Value::tuple({Value::integer(1)}),
                                              Value::tuple({Value::integer(1), Value::string("a")}),
                                              Value::tuple({Value(), Value(), Value()}),
                                              Value::tuple({Value::integer(1), Value::integer(2), Value::integer(3),
                                                            Value::integer(4)})}));
  Value ik = Value::dict();
  ik.set(Value::integer(7), Value::string("seven"));
  ik.set(Value::integer(-3), Value::string("minus three"));
  v.set(Value::string("int_keys"), ik);
  Value od = Value::ordered_dict();
  const std::vector<float> w = {1.0f, -2.0f, 0.5f, 3.25f, 1e-8f, -0.0f};
  od.set(Value::string("w"), Value::tensor(Tensor::from_f32(w, {2, 3})));
  Tensor h;
  h.dtype = Dtype::bf16;
  h.shape = {3};
  for (float x : {1.0f, -0.5f, 300.0f}) {
    const uint16_t b = f32_to_bf16(x).bits;
    h.data.push_back(uint8_t(b));
    h.data.push_back(uint8_t(b >> 8));
  }
  od.set(Value::string("bf16"), Value::tensor(h));
  Tensor u;  // a dtype without a legacy storage class: _rebuild_tensor_v3
  u.dtype = Dtype::u16;
  u.shape = {2};
  u.data = {1, 0, 0xff, 0xff};
  od.set(Value::string("u16"), Value::tensor(u));
  Tensor i64;
  i64.dtype = Dtype::i64;
  i64.shape = {1, 1};
  i64.data.assign(8, 0xff);
  i64.requires_grad = false;
  od.set(Value::string("i64"), Value::tensor(i64));
  Tensor scalar = Tensor::from_f32(std::vector<float>{42.0f}, {});
  scalar.requires_grad = true;
  od.set(Value::string("scalar"), Value::tensor(scalar));
  od.set(Value::string("empty"), Value::tensor(Tensor::from_f32({}, {0, 4})));
  v.set(Value::string("state"), od);
  Value many = Value::list();  // more than one pickle batch (1000)
  for (int i = 0; i < 2500; ++i) many.push_back(Value::integer(i));
  v.set(Value::string("many"), many);
  Value big = Value::dict();
  for (int i = 0; i < 1001; ++i) big.set(Value::integer(i), Value::integer(-i));
  v.set(Value::string("big_dict"), big);
  return v;
}

TEST(TorchPt, WriterRoundTrip) {
  const Value v = sample_value();
  const std::vector<uint8_t> bytes = save_bytes(v, "sample");
  EXPECT_EQ(save_bytes(v, "sample"), bytes);  // deterministic
  const Value back = load_bytes(bytes, "sample.pt");
  EXPECT_TRUE(back == v);
  EXPECT_TRUE(back.at("state").ordered());
  EXPECT_FALSE(back.at("int_keys").ordered());
  EXPECT_TRUE(back.at("state").at("scalar").as_tensor().requires_grad);
  EXPECT_EQ(back.at("state").at("w").as_tensor().strides, (std::vector<int64_t>{3, 1}));
  // Our own fixtures survive a write/read cycle too.
  for (const char* f : {"values.pt", "state_dict.pt", "rotation/k_rotation_qqt_r_h_pbr.pt"}) {
    const Value a = load(data_dir + f);
    EXPECT_TRUE(load_bytes(save_bytes(a, "x"), f) == a) << f;
  }
}

TEST(TorchPt, WriterLayoutMatchesTorch) {
  const std::vector<uint8_t> bytes = save_bytes(sample_value(), "archive");
  zip::Reader r(bytes, "archive.pt");
  const std::vector<std::string> want = {"archive/data.pkl", "archive/.format_version", "archive/.storage_alignment",
                                         "archive/byteorder"};
  ASSERT_GE(r.names().size(), want.size() + 2);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(r.names()[i], want[i]);
  EXPECT_EQ(r.names()[r.names().size() - 2], "archive/version");
  EXPECT_EQ(r.names().back(), "archive/.data/serialization_id");
  EXPECT_EQ(r.read("archive/byteorder", 100), (std::vector<uint8_t>{'l', 'i', 't', 't', 'l', 'e'}));
  EXPECT_EQ(r.entry_size("archive/.data/serialization_id"), 40u);
  // Every record's data starts on a 64-byte boundary (local header + name + extra).
  size_t off = 0, records = 0;
  while (off + 30 <= bytes.size() && bytes[off] == 'P' && bytes[off + 1] == 'K' && bytes[off + 2] == 3) {
    auto u16 = [&](size_t o) { return size_t(bytes[o]) | size_t(bytes[o + 1]) << 8; };
    auto u32 = [&](size_t o) { return u16(o) | u16(o + 2) << 16; };
    const size_t data = off + 30 + u16(off + 26) + u16(off + 28);
    EXPECT_EQ(data % 64, 0u) << records;
    off = data + u32(off + 18);
    ++records;
  }
  EXPECT_EQ(records, r.names().size());
  EXPECT_THROW((void)save_bytes(sample_value(), "a/b"), Error);
  Value bad = Value::dict();
  Tensor t;
  t.shape = {3};  // no data
  bad.set(Value::string("t"), Value::tensor(t));
  EXPECT_THROW((void)save_bytes(bad, "x"), Error);
}

// The JSON description check_pt_roundtrip.py compares torch.load's result against.
nlohmann::json describe(const Value& v) {
  using K = Value::Kind;
  switch (v.kind()) {
    case K::none: return {{"t", "none"}};
    case K::boolean: return {{"t", "bool"}, {"v", v.as_bool()}};
    case K::integer: return {{"t", "int"}, {"v", std::to_string(v.as_int())}};
    case K::real: return {{"t", "float"}, {"v", fmt::format("{:a}", v.as_double())}};
    case K::string: return {{"t", "str"}, {"v", v.as_string()}};
    case K::list:
    case K::tuple: {
      nlohmann::json items = nlohmann::json::array();
      for (const Value& x : v.items()) items.push_back(describe(x));
      return {{"t", v.kind() == K::list ? "list" : "tuple"}, {"v", items}};
    }
    case K::dict: {
      nlohmann::json items = nlohmann::json::array();
      for (size_t i = 0; i < v.size(); ++i) items.push_back({describe(v.keys()[i]), describe(v.values()[i])});
      return {{"t", "dict"}, {"ordered", v.ordered()}, {"v", items}};
    }
    case K::tensor: {
      const Tensor& t = v.as_tensor();
      std::string hex;
      for (uint8_t b : t.data) hex += fmt::format("{:02x}", b);
      return {{"t", "tensor"}, {"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"requires_grad", t.requires_grad},
              {"hex", hex}};
    }
  }
  return {};
}

bool torch_available() {
  static const bool ok =
      std::system(("bash " + std::string(OSCAR_SOURCE_DIR) + "/tests/reference/torch_cpu.sh available").c_str()) == 0;
  return ok;
}

TEST(TorchPt, TorchLoadsWhatWeWrite) {
  if (!torch_available()) GTEST_SKIP() << "torch not installed (tests/reference/torch_cpu.sh install)";
  const auto dir = std::filesystem::temp_directory_path() / fmt::format("oscar_pt_{}", ::getpid());
  std::filesystem::create_directories(dir);
  int n = 0;
  std::string args;
  for (const Value& v : {sample_value(), load(data_dir + "state_dict.pt"), load(data_dir + "values.pt")}) {
    const std::string pt = (dir / fmt::format("v{}.pt", n)).string(), js = (dir / fmt::format("v{}.json", n)).string();
    ++n;
    save(v, pt);
    std::ofstream(js) << describe(v).dump();
    args += " " + pt + " " + js;
  }
  const std::string cmd = fmt::format("bash {0}/tests/reference/torch_cpu.sh python {0}/tests/reference/check_pt_roundtrip.py{1}",
                                      OSCAR_SOURCE_DIR, args);
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace oscar::pt
