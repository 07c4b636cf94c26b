// PyTorch .pt files on arbitrary bytes: the zip directory (libzip), then the whitelisting
// unpickler and the tensor rebuild. Small limits keep each input's memory bounded.
#include <cstddef>
#include <cstdint>
#include <span>

#include "fuzz_util.h"
#include "oscar/core/error.h"
#include "oscar/formats/torch_pt.h"

namespace {
// Walks the value tree; tensors convert to f32 where their dtype allows.
void visit(const oscar::pt::Value& v, int depth) {
  FUZZ_EXPECT(depth < 10000);
  if (v.is_tensor()) {
    const auto& t = v.as_tensor();
    FUZZ_EXPECT(t.numel() >= 0);
    try {
      FUZZ_EXPECT(t.to_f32().size() == size_t(t.numel()));
    } catch (const oscar::Error&) {
    }
  }
  using K = oscar::pt::Value::Kind;
  if (v.kind() == K::list || v.kind() == K::tuple)
    for (const auto& item : v.items()) visit(item, depth + 1);
  if (v.is_dict()) {
    FUZZ_EXPECT(v.keys().size() == v.values().size());
    for (size_t i = 0; i < v.keys().size(); ++i) {
      FUZZ_EXPECT(v.keys()[i].kind() == K::integer || v.keys()[i].kind() == K::string);
      visit(v.values()[i], depth + 1);
    }
  }
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  oscar::pt::Limits limits;  // bounded memory per input (zip bombs, huge views)
  limits.max_pickle_bytes = 8u << 20;
  limits.max_values = 1u << 16;
  limits.tensor_bytes_slack = 16u << 20;
  limits.max_entry_bytes = 64u << 20;
  try {
    visit(oscar::pt::load_bytes(std::span<const uint8_t>(data, size), "fuzz.pt", limits), 0);
  } catch (const oscar::Error&) {
  }
  return 0;
}
