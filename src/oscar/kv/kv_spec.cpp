#include "oscar/kv/kv_spec.h"

#include <algorithm>

#include "oscar/core/error.h"

namespace oscar {

const char* kv_quant_name(KvQuant q) {
  switch (q) {
    case KvQuant::none: return "none";
    case KvQuant::int8: return "int8";
    case KvQuant::int4: return "int4";
    case KvQuant::int2: return "int2";
    case KvQuant::int2_lloyd_max: return "int2_lloyd_max";
    case KvQuant::int2_lloyd_max_exact: return "int2_lloyd_max_exact";
    case KvQuant::kivi2: return "kivi2";
  }
  return "?";
}

int KvSpec::bits() const {
  switch (quant) {
    case KvQuant::none: return 8 * fp_bytes_per_element();
    case KvQuant::int8: return 8;
    case KvQuant::int4: return 4;
    case KvQuant::int2:
    case KvQuant::int2_lloyd_max:
    case KvQuant::int2_lloyd_max_exact:
    case KvQuant::kivi2: return 2;
  }
  return 0;
}

int64_t KvSpec::history_end(int64_t t) const {
  if (!quantized() || t <= sink) return std::min<int64_t>(t, sink);
  const int64_t T = demote_tokens();
  const int64_t excess = std::max<int64_t>(0, t - sink - recent);
  return sink + T * (excess / T);
}

KvSpec KvSpec::parse(std::string_view kv) {
  KvSpec s;
  s.mode = std::string(kv);
  if (kv == "bf16") {
  } else if (kv == "f32") {
    s.dtype = KvDtype::f32;
  } else if (kv == "int8") {
    s.quant = KvQuant::int8;
  } else if (kv == "int4") {
    s.quant = KvQuant::int4;
  } else if (kv == "int2") {
    s.quant = KvQuant::int2;
  } else if (kv == "int2-hadamard") {
    s.quant = KvQuant::int2;
    s.rotation = KvRotation::hadamard;
  } else if (kv == "kivi2") {
    // KIVI-2: no sink, a 128-token full-precision residual, keys per channel in groups of 32 tokens.
    s.quant = KvQuant::kivi2;
    s.sink = 0;
    s.recent = 128;
    s.group = 32;
  } else if (kv == "int2-oscar" || kv == "int2-oscar-lloydmax" || kv == "int2-oscar-lloydmax-exact") {
    s.quant = kv == "int2-oscar"            ? KvQuant::int2
              : kv == "int2-oscar-lloydmax" ? KvQuant::int2_lloyd_max
                                            : KvQuant::int2_lloyd_max_exact;
    s.rotation = KvRotation::calibrated;
    s.k_clip = 0.96f;  // the published recipe; a rotation set's per-layer values override
    s.v_clip = 0.92f;
  } else {
    fail("unknown KV cache type '{}' (valid: bf16, f32, int8, int4, int2, int2-hadamard, kivi2, int2-oscar, "
         "int2-oscar-lloydmax, int2-oscar-lloydmax-exact)", kv);
  }
  return s;
}

void KvSpec::validate() const {
  if (block_tokens <= 0 || block_tokens > 4096) fail("KV page size {} out of range", block_tokens);
  if (sink < 0 || recent < 0) fail("KV windows must not be negative (sink {}, recent {})", sink, recent);
  if (group <= 0 || (group & (group - 1)) != 0) fail("--kv-group {} must be a power of two", group);
  if (!(k_clip >= 0.0f && k_clip <= 1.0f)) fail("--k-clip {} must lie in [0, 1]", k_clip);
  if (!(v_clip >= 0.0f && v_clip <= 1.0f)) fail("--v-clip {} must lie in [0, 1]", v_clip);
  if (quant == KvQuant::kivi2 && (kivi_tokens <= 0 || kivi_tokens > 1024)) fail("KIVI token group {} out of range", kivi_tokens);
}

}  // namespace oscar
