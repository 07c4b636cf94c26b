#include "oscar/kv/kv_spec.h"

#include "oscar/core/error.h"

namespace oscar {

std::string KvSpec::name() const { return dtype == KvDtype::f32 ? "f32" : "bf16"; }

KvSpec KvSpec::parse(std::string_view kv) {
  KvSpec s;
  if (kv == "bf16") {
    s.dtype = KvDtype::bf16;
  } else if (kv == "f32") {
    s.dtype = KvDtype::f32;
  } else {
    fail("unknown KV cache type '{}' (valid: bf16, f32)", kv);
  }
  return s;
}

}  // namespace oscar
