// Weights straight to the device, on the GPU (skipped where there is none):
//  * every stored type (F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q4_K Q5_K Q6_K) converted on the
//    device equals the CPU reference (formats' dequantize_row, then f32_to_bf16) bit for bit,
//    on random blocks, for awkward block counts;
//  * R_V folded into W_v and W_o on the device is within one BF16 step of a double reference;
//  * a model file (BF16 and Q8_0 GGUFs at a small shape) streamed by load_device_model gives
//    the logits of the old path (f32 on the host, R_V absorbed there, BF16 uploaded): the
//    same to the bit with BF16 KV, within 2e-3 of the logits' scale with int2-oscar.
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>

#include "../mixed_cache_util.h"
#include "../tiny_model.h"
#include "gpu_test_util.h"
#include "oscar/core/dtype.h"
#include "oscar/core/error.h"
#include "oscar/cuda/weight_convert.h"
#include "oscar/engine/cuda/device_model_loader.h"
#include "oscar/engine/cuda/device_weight_loader.h"
#include "oscar/formats/ggml_type.h"
#include "oscar/model/model_shapes.h"
#include "oscar/model/transformer.h"
#include "oscar/model/weight_source.h"

namespace oscar {
namespace {

namespace fs = std::filesystem;

#define SKIP_WITHOUT_GPU() \
  if (!test::have_gpu()) GTEST_SKIP() << "no GPU"

template <class T>
struct DeviceBuffer {
  T* p = nullptr;
  explicit DeviceBuffer(size_t n) { EXPECT_EQ(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)), cudaSuccess); }
  ~DeviceBuffer() { cudaFree(p); }
};

struct TypeCase {
  GgmlType ggml;
  cuda::StoredType stored;
  std::vector<int> half_fields;  // byte offsets of a block's fp16 scales (kept finite)
};

const std::vector<TypeCase>& type_cases() {
  using S = cuda::StoredType;
  static const std::vector<TypeCase> cases = {
      {GgmlType::q4_0, S::q4_0, {0}},    {GgmlType::q4_1, S::q4_1, {0, 2}}, {GgmlType::q5_0, S::q5_0, {0}},
      {GgmlType::q5_1, S::q5_1, {0, 2}}, {GgmlType::q8_0, S::q8_0, {0}},    {GgmlType::q4_k, S::q4_k, {0, 2}},
      {GgmlType::q5_k, S::q5_k, {0, 2}}, {GgmlType::q6_k, S::q6_k, {208}},  {GgmlType::f32, S::f32, {}},
      {GgmlType::f16, S::f16, {}},       {GgmlType::bf16, S::bf16, {}},
  };
  return cases;
}

// n_blocks random blocks of `c`: random bytes, scales finite and of either sign, plain
// types from random floats.
std::vector<uint8_t> random_blocks(const TypeCase& c, int64_t n_blocks, std::mt19937_64& rng) {
  const int64_t bb = ggml_block_bytes(c.ggml);
  std::vector<uint8_t> b(size_t(n_blocks * bb));
  std::uniform_int_distribution<int> byte(0, 255);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (uint8_t& x : b) x = uint8_t(byte(rng));
  for (int64_t i = 0; i < n_blocks; ++i) {
    uint8_t* blk = b.data() + i * bb;
    if (c.ggml == GgmlType::f32) {
      const float v = g(rng) * 3.0f;
      std::memcpy(blk, &v, 4);
    } else if (c.ggml == GgmlType::f16) {
      const uint16_t h = f32_to_fp16(g(rng)).bits;
      std::memcpy(blk, &h, 2);
    } else if (c.ggml == GgmlType::bf16) {
      const uint16_t h = f32_to_bf16(g(rng)).bits;
      std::memcpy(blk, &h, 2);
    }
    for (int off : c.half_fields) {
      const uint16_t h = f32_to_fp16(g(rng) * 0.01f).bits;
      std::memcpy(blk + off, &h, 2);
    }
  }
  return b;
}

TEST(DeviceWeightConvert, EveryTypeMatchesTheCpuReferenceBitForBit) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(2024);
  for (const TypeCase& c : type_cases()) {
    const int64_t be = ggml_block_elements(c.ggml);
    for (int64_t n_blocks : {int64_t(1), int64_t(3), int64_t(97), int64_t(1031)}) {
      const std::vector<uint8_t> src = random_blocks(c, n_blocks, rng);
      const int64_t n = n_blocks * be;
      const size_t un = static_cast<size_t>(n);
      std::vector<float> ref(un);
      dequantize_row(c.ggml, src.data(), ref.data(), n);
      DeviceBuffer<uint8_t> d_src(src.size());
      DeviceBuffer<uint16_t> d_bf16(un);
      DeviceBuffer<float> d_f32(un);
      ASSERT_EQ(cudaMemcpy(d_src.p, src.data(), src.size(), cudaMemcpyHostToDevice), cudaSuccess);
      cuda::stored_to_bf16(c.stored, d_src.p, d_bf16.p, n, nullptr);
      cuda::stored_to_f32(c.stored, d_src.p, d_f32.p, n, nullptr);
      std::vector<uint16_t> got16(un);
      std::vector<float> got32(un);
      ASSERT_EQ(cudaMemcpy(got16.data(), d_bf16.p, size_t(n) * 2, cudaMemcpyDeviceToHost), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(got32.data(), d_f32.p, size_t(n) * 4, cudaMemcpyDeviceToHost), cudaSuccess);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(std::memcmp(&got32[size_t(i)], &ref[size_t(i)], 4), 0)
            << ggml_type_name(c.ggml) << " element " << i << ": " << got32[size_t(i)] << " vs " << ref[size_t(i)];
        ASSERT_EQ(got16[size_t(i)], f32_to_bf16(ref[size_t(i)]).bits) << ggml_type_name(c.ggml) << " element " << i;
      }
    }
    // Not a whole number of blocks: refused.
    if (be > 1) {
      EXPECT_THROW(cuda::stored_to_bf16(c.stored, nullptr, nullptr, be + 1, nullptr), std::runtime_error);
    }
  }
}

// |got − ref| at most one BF16 step of ref (the double sums may round the other way).
void expect_within_one_bf16_step(const std::vector<uint16_t>& got, const std::vector<double>& ref, const char* what) {
  ASSERT_EQ(got.size(), ref.size());
  for (size_t i = 0; i < ref.size(); ++i) {
    const float r = float(ref[i]);
    const float step = std::ldexp(1.0f, std::ilogb(r) - 7);
    ASSERT_LE(std::abs(bf16_to_f32(bf16{got[i]}) - r), step) << what << " element " << i << " ref " << r;
  }
}

TEST(DeviceWeightConvert, AbsorbsRvIntoValueAndOutputProjections) {
  SKIP_WITHOUT_GPU();
  const int d = 64, heads = 3, kv_heads = 2;
  const int64_t cols = 97, rows = 54;  // W_v [kv_heads·d, cols], W_o [rows, heads·d]
  std::mt19937_64 rng(7);
  std::normal_distribution<float> g(0.0f, 1.0f);
  const std::vector<float> r = test::random_orthogonal(d, 11);
  std::vector<float> wv(size_t(kv_heads * d * cols)), wo(size_t(rows * heads * d));
  for (float& x : wv) x = g(rng);
  for (float& x : wo) x = g(rng);
  std::vector<double> ref_v(wv.size()), ref_o(wo.size());
  for (int h = 0; h < kv_heads; ++h)
    for (int i = 0; i < d; ++i)
      for (int64_t c = 0; c < cols; ++c) {
        double acc = 0.0;
        for (int j = 0; j < d; ++j) acc += double(r[size_t(j * d + i)]) * wv[size_t((h * d + j) * cols + c)];
        ref_v[size_t((h * d + i) * cols + c)] = acc;
      }
  for (int64_t s = 0; s < rows * heads; ++s)
    for (int i = 0; i < d; ++i) {
      double acc = 0.0;
      for (int j = 0; j < d; ++j) acc += double(wo[size_t(s * d + j)]) * r[size_t(j * d + i)];
      ref_o[size_t(s * d + i)] = acc;
    }
  DeviceBuffer<float> d_r(r.size()), d_wv(wv.size()), d_wo(wo.size());
  DeviceBuffer<uint16_t> d_ov(wv.size()), d_oo(wo.size());
  cudaMemcpy(d_r.p, r.data(), r.size() * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(d_wv.p, wv.data(), wv.size() * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(d_wo.p, wo.data(), wo.size() * 4, cudaMemcpyHostToDevice);
  cuda::absorb_value_rows(d_wv.p, d_r.p, d_ov.p, kv_heads, d, cols, nullptr);
  cuda::absorb_output_columns(d_wo.p, d_r.p, d_oo.p, rows, heads, d, nullptr);
  std::vector<uint16_t> got_v(wv.size()), got_o(wo.size());
  ASSERT_EQ(cudaMemcpy(got_v.data(), d_ov.p, got_v.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(got_o.data(), d_oo.p, got_o.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
  expect_within_one_bf16_step(got_v, ref_v, "W_v");
  expect_within_one_bf16_step(got_o, ref_o, "W_o");
}

// A small model file at a shape the device runs (head_dim 64, GQA 2).
struct ModelFile {
  std::string path;
  ModelFile(GgmlType type, Arch arch) {
    ModelShape s = find_model_shape("tiny");
    s.name = "tiny-device";
    s.config.arch = arch;
    s.config.head_dim = 64;
    s.config.n_embd = 128;
    s.config.n_ff = 192;
    s.config.rope_style = arch == Arch::llama ? RopeStyle::interleaved : RopeStyle::neox;
    s.config.qkv_bias = arch == Arch::qwen2;
    s.config.qk_norm = arch == Arch::qwen3;
    if (arch != Arch::llama) s.tokenizer_pre = "qwen2";
    path = (fs::temp_directory_path() / ("oscar_dwl_" + std::to_string(::getpid()) + "_" + ggml_type_name(type) + "_" +
                                         arch_name(arch) + ".gguf"))
               .string();
    write_random_model(s, path, 5, type);
  }
  ~ModelFile() { fs::remove(path); }
};

Transformer configured(const std::string& path, WeightStorage storage, const std::string& kv, const RotationSet* rs) {
  const auto src = open_weight_source(path);
  Transformer t(load_model_weights(*src, storage));
  KvSpec s = test::tiny_kv_spec(kv, 16, 32);
  s.k_bias_split = false;
  t.configure_kv(s, rs);
  return t;
}

std::vector<float> prefill_logits(cuda::DeviceModel& dm, const std::vector<int32_t>& tokens) {
  const int slot = dm.cache().add_sequence();
  std::vector<float> logits;
  dm.prefill(slot, tokens, &logits, 0);
  dm.cache().remove_sequence(slot);
  return logits;
}

TEST(DeviceWeightLoader, StreamedFileGivesTheLogitsOfTheHostPath) {
  SKIP_WITHOUT_GPU();
  std::vector<int32_t> tokens(150);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t((i * 37 + 11) % 500);
  cuda::KvCacheLimits limits;
  limits.max_seqs = 1;
  limits.max_seq_len = 256;
  for (GgmlType type : {GgmlType::bf16, GgmlType::q8_0}) {
    for (Arch arch : {Arch::llama, Arch::qwen2, Arch::qwen3}) {
      const ModelFile file(type, arch);
      const RotationSet rs = test::random_rotation_set(2, 64, 500, 600);
      for (const char* kv : {"bf16", "int2-oscar"}) {
        SCOPED_TRACE(std::string(ggml_type_name(type)) + " " + arch_name(arch) + " " + kv);
        const RotationSet* r = std::string(kv) == "bf16" ? nullptr : &rs;
        // The old path: f32 on the host (R_V absorbed there in double), BF16 uploaded.
        const Transformer host = configured(file.path, WeightStorage::f32, kv, r);
        cuda::DeviceModel ref(device_host_model(host), device_kv_format(host), limits);
        // The streamed path: views of the file, R_V folded in on the device.
        const Transformer native = configured(file.path, WeightStorage::native, kv, r);
        DeviceLoadStats stats;
        const std::unique_ptr<cuda::DeviceModel> dm = load_device_model(native, limits, cuda::GemmPrecision::bf16, &stats);
        EXPECT_EQ(dm->weight_bytes(), ref.weight_bytes());
        EXPECT_GT(stats.file_bytes, 0);
        const std::vector<float> want = prefill_logits(ref, tokens), got = prefill_logits(*dm, tokens);
        ASSERT_EQ(got.size(), want.size());
        // --weights f32 --device cuda: the host's f32 matrices (R_V already folded in there)
        // streamed and rounded on the device give the host path's weights exactly.
        const std::unique_ptr<cuda::DeviceModel> from_f32 = load_device_model(host, limits);
        const std::vector<float> f32_logits = prefill_logits(*from_f32, tokens);
        ASSERT_EQ(std::memcmp(f32_logits.data(), want.data(), want.size() * 4), 0);
        if (!r) {
          ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0);
        } else {
          // A weight one BF16 step apart can move a 2-bit code across its boundary.
          EXPECT_LE(test::max_rel_error(got.data(), want.data(), got.size()), 2e-2);
        }
      }
    }
  }
}

}  // namespace
}  // namespace oscar
