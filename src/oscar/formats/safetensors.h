// Safetensors reader (mmap): 8-byte little-endian header length, a JSON header naming
// each tensor's dtype, shape and byte range, then the raw data. Everything read from
// the file is validated before use; a corrupt file raises oscar::Error naming the file
// and the tensor, never crashes. A model may be one file or a directory of shards.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "oscar/core/mapped_file.h"

namespace oscar::safetensors {

// Every dtype of the format is recognised (so offsets can be checked), but only
// F32/F16/BF16 can be loaded as floats.
enum class Dtype { f64, f32, f16, bf16, i64, i32, i16, i8, u64, u32, u16, u8, boolean, f8_e4m3, f8_e5m2 };
const char* dtype_name(Dtype d);  // as spelled in the file: "F32", "BF16", ...
size_t dtype_size(Dtype d);       // bytes per element

constexpr uint64_t max_header_bytes = 100ull << 20;  // the reference reader's limit

struct TensorInfo {
  std::string name;
  Dtype dtype = Dtype::f32;
  std::vector<int64_t> shape;  // row-major, outermost first
  uint64_t n_elements = 0;
  uint64_t n_bytes = 0;
  uint64_t begin = 0;          // data_offsets[0], relative to the start of the data section
  const uint8_t* data = nullptr;  // points into the mapping (validated to lie inside it)
};

class SafetensorsFile {
 public:
  // Maps and parses the file; throws oscar::Error naming the file and the bad field.
  static SafetensorsFile open(const std::string& path);
  // Parses an in-memory image (tests, fuzzing); `bytes` must outlive the object.
  static SafetensorsFile parse(const uint8_t* bytes, size_t size, std::string name_for_errors);

  const std::string& path() const { return path_; }
  // The optional "__metadata__" object (string to string).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }  // in header order
  const TensorInfo* find_tensor(std::string_view name) const;
  const TensorInfo& tensor(std::string_view name) const;  // throws naming the tensor
  // F32/F16/BF16 converted exactly to f32; other dtypes are refused with an error.
  std::vector<float> load_f32(const TensorInfo& t) const;
  // The mapping every TensorInfo::data points into (null for parse()d images).
  std::shared_ptr<const void> mapping() const { return map_; }

 private:
  std::shared_ptr<MappedFile> map_;
  std::string path_;
  std::map<std::string, std::string> metadata_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> index_;
};

// Converts one tensor to f32 (`file` names the source in errors).
std::vector<float> tensor_to_f32(const TensorInfo& t, std::string_view file);

// A model split over one or more files: a single .safetensors file, or a directory
// holding model.safetensors.index.json (its weight_map names the shards) or else
// every *.safetensors file in it. Tensor names are unique across shards.
class SafetensorsModel {
 public:
  static SafetensorsModel open(const std::string& path);

  const std::vector<SafetensorsFile>& shards() const { return shards_; }
  std::vector<std::string> tensor_names() const;  // sorted
  const TensorInfo* find_tensor(std::string_view name) const;
  const TensorInfo& tensor(std::string_view name) const;  // throws naming the tensor
  std::vector<float> load_f32(std::string_view name) const;
  // The mapping of the shard holding `name` (keeps its TensorInfo::data valid).
  std::shared_ptr<const void> mapping(std::string_view name) const;

 private:
  void add_shard(SafetensorsFile f);
  struct Location { size_t shard; size_t tensor; };
  std::vector<SafetensorsFile> shards_;
  std::map<std::string, Location, std::less<>> index_;
};

}  // namespace oscar::safetensors
