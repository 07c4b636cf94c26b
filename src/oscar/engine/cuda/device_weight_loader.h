// The CPU engine's weights onto the device, tensor by tensor, without a host copy of the
// model: ModelWeights' matrices are views of the mapped model file (GGUF or safetensors,
// WeightStorage::native), so their stored bytes go in chunks through two pinned staging
// buffers to the device, where cuda/weight_convert.h turns them into BF16 (the ggml block
// formats dequantized there) and folds R_V into W_v and W_o where the host did not. Pages
// of the file are dropped from the process once copied (they stay in the page cache), so
// the host's resident memory stays at the staging buffers whatever the model's size.
// Built only with CUDA.
#pragma once
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "oscar/engine/cuda/device_model.h"
#include "oscar/model/model_weights.h"
#include "oscar/model/transformer.h"

namespace oscar {

class FileWeightLoader final : public cuda::WeightLoader {
 public:
  // rot_v: per layer, R_V ([d, d] row-major) to fold into W_v, b_v and W_o on the way;
  // empty (or an empty entry): that layer's weights go as they are. `w` must outlive this.
  FileWeightLoader(const ModelWeights& w, std::vector<std::vector<float>> rot_v);
  ~FileWeightLoader() override;
  FileWeightLoader(const FileWeightLoader&) = delete;
  FileWeightLoader& operator=(const FileWeightLoader&) = delete;

  void load(const cuda::WeightTarget& t, cudaStream_t stream) const override;

  int64_t bytes_read() const { return bytes_read_; }  // stored bytes copied so far

 private:
  struct Staging;
  // Copies `bytes` stored bytes at src to the device in chunks of whole blocks; `sink`
  // consumes each chunk (device pointer, its first element, its element count).
  template <class Sink>
  void stream_bytes(const uint8_t* src, uint64_t bytes, int block_elems, int block_bytes, cudaStream_t stream,
                    const Sink& sink) const;
  float* absorb_scratch(size_t n) const;  // device f32, grown on demand

  const ModelWeights& w_;
  std::vector<std::vector<float>> rot_v_;
  std::vector<float*> rot_v_dev_;  // device copies, per layer (null: none)
  std::unique_ptr<Staging> staging_;
  mutable float* scratch_ = nullptr;
  mutable size_t scratch_elems_ = 0;
  mutable int64_t bytes_read_ = 0;
  std::vector<std::pair<uintptr_t, uintptr_t>> file_maps_;  // read-only file mappings of the process
};

struct DeviceLoadStats {
  double seconds = 0.0;      // allocation, streaming and conversion of every weight
  int64_t file_bytes = 0;    // stored bytes read from the model file
  int64_t device_bytes = 0;  // what the weights take on the device
};

// The configured Transformer on the device: its shape and KV format (device_model_loader.h),
// the weights streamed by FileWeightLoader with R_V folded in on the device, and the cache
// sized by `limits`. Throws oscar::Error naming what failed.
std::unique_ptr<cuda::DeviceModel> load_device_model(const Transformer& t, const cuda::KvCacheLimits& limits,
                                                     cuda::GemmPrecision precision = cuda::GemmPrecision::bf16,
                                                     DeviceLoadStats* stats = nullptr);

}  // namespace oscar
