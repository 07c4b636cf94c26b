// The safetensors header on arbitrary bytes: the length prefix, the JSON, dtypes, shapes
// and data offsets. Every tensor a parse accepts lies inside the image, with the byte
// count its dtype and shape give; F32/F16/BF16 tensors convert.
#include <cstddef>
#include <cstdint>

#include "fuzz_util.h"
#include "oscar/core/error.h"
#include "oscar/formats/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace st = oscar::safetensors;
  try {
    const st::SafetensorsFile f = st::SafetensorsFile::parse(data, size, "fuzz.safetensors");
    for (const auto& t : f.tensors()) {
      FUZZ_EXPECT(t.data >= data && t.n_bytes <= size && size_t(t.data - data) <= size - t.n_bytes);
      FUZZ_EXPECT(t.n_bytes == t.n_elements * st::dtype_size(t.dtype));
      if (t.n_bytes <= (1u << 20)) {
        try {
          FUZZ_EXPECT(f.load_f32(t).size() == t.n_elements);
        } catch (const oscar::Error&) {
        }
      }
    }
  } catch (const oscar::Error&) {
  }
  return 0;
}
