// The GGUF reader on arbitrary bytes: header, metadata, tensor infos, offsets, and then the
// model hyperparameters read from the metadata. Every tensor a parse accepts must lie inside
// the image, and its byte count must be what its type and shape give.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_util.h"
#include "oscar/core/error.h"
#include "oscar/formats/ggml_type.h"
#include "oscar/formats/gguf.h"
#include "oscar/model/gguf_weight_source.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const oscar::gguf::GgufFile f = oscar::gguf::GgufFile::parse(data, size, "fuzz.gguf");
    for (const auto& t : f.tensors()) {
      FUZZ_EXPECT(t.data >= data && t.n_bytes <= size && size_t(t.data - data) <= size - t.n_bytes);
    }
    for (const auto& [key, value] : f.metadata()) (void)value.to_display();
    try {
      (void)oscar::gguf_model_config(f);
    } catch (const oscar::Error&) {
    }
  } catch (const oscar::Error&) {
  }
  return 0;
}
