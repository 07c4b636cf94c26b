// GGUF v3 writer for files larger than memory: metadata and tensor infos are declared
// first and written by begin(); each tensor's bytes then follow in declaration order, in
// pieces of any size, and are padded to the alignment as GgufWriter pads them.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "oscar/formats/gguf.h"
#include "oscar/formats/gguf_emitter.h"

namespace oscar::gguf {

class GgufStreamWriter {
 public:
  // Nothing is written before begin(). The file goes to path.tmp, renamed to `path` by
  // finish(); a writer destroyed before finish() removes path.tmp.
  explicit GgufStreamWriter(std::string path);
  ~GgufStreamWriter();
  GgufStreamWriter(const GgufStreamWriter&) = delete;
  GgufStreamWriter& operator=(const GgufStreamWriter&) = delete;

  // Metadata, in insertion order (a repeated key replaces the earlier value). Before begin().
  void set(std::string key, Value v);
  void set_string(std::string key, std::string v);
  void set_u32(std::string key, uint32_t v);
  void set_f32(std::string key, float v);
  void set_bool(std::string key, bool v);
  void set_string_array(std::string key, const std::vector<std::string>& v);
  void set_i32_array(std::string key, const std::vector<int32_t>& v);

  // Declares the next tensor (ne innermost first, as in the file); returns its byte size.
  // Before begin().
  uint64_t add_tensor(std::string name, GgmlType type, std::vector<uint64_t> ne);

  // Opens path.tmp and writes the header, metadata, tensor infos and the padding before
  // the data section. Throws oscar::Error naming the file if it cannot be created, or if
  // `path` exists and is not a regular file (a device, a directory).
  void begin();
  // The next `n` bytes of the current tensor; a piece may not run past the tensor's end.
  void write_data(const void* data, size_t n);
  // Checks that every tensor got all its bytes, closes the file and renames it.
  void finish();

  uint64_t bytes_written() const { return out_.written(); }
  uint64_t data_bytes() const;  // sum of all tensors' bytes, before padding

 private:
  struct TensorDecl {
    std::string name;
    GgmlType type;
    std::vector<uint64_t> ne;
    uint64_t n_bytes;
  };
  void write_file(const void* p, size_t n);

  std::string path_, tmp_path_;
  std::vector<std::pair<std::string, Value>> kv_;
  std::vector<TensorDecl> tensors_;
  uint64_t alignment_ = 32;
  std::FILE* file_ = nullptr;
  detail::Emitter out_{[this](const void* p, size_t n) { write_file(p, n); }};  // GgufWriter's encoding, to file_
  size_t current_ = 0;           // index of the tensor write_data fills
  uint64_t current_written_ = 0; // bytes of it written so far
  bool began_ = false;
};

}  // namespace oscar::gguf
