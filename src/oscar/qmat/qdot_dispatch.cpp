// The per-format kernel tables of qdot.h and the activation format each weight format takes.
#include "oscar/qmat/qdot.h"

namespace oscar::qmat {

ActFormat qdot_act_format(GgmlType t) {
  switch (t) {
    case GgmlType::q4_0:
    case GgmlType::q4_1:
    case GgmlType::q5_0:
    case GgmlType::q5_1:
    case GgmlType::q8_0: return ActFormat::q8;
    case GgmlType::q4_k:
    case GgmlType::q5_k:
    case GgmlType::q6_k: return ActFormat::q8_k;
    default: return ActFormat::none;
  }
}

QDotFn qdot_ref_kernel(GgmlType t) {
  switch (t) {
    case GgmlType::q4_0: return qdot_q4_0_ref;
    case GgmlType::q4_1: return qdot_q4_1_ref;
    case GgmlType::q5_0: return qdot_q5_0_ref;
    case GgmlType::q5_1: return qdot_q5_1_ref;
    case GgmlType::q8_0: return qdot_q8_0_ref;
    default: return nullptr;
  }
}

QDotFn qdot_avx2_kernel(GgmlType t) {
  switch (t) {
    case GgmlType::q4_0: return qdot_q4_0_avx2;
    case GgmlType::q4_1: return qdot_q4_1_avx2;
    case GgmlType::q5_0: return qdot_q5_0_avx2;
    case GgmlType::q5_1: return qdot_q5_1_avx2;
    case GgmlType::q8_0: return qdot_q8_0_avx2;
    default: return nullptr;
  }
}

QDot4Fn qdot4_avx2_kernel(GgmlType t) {
  switch (t) {
    case GgmlType::q4_0: return qdot4_q4_0_avx2;
    case GgmlType::q4_1: return qdot4_q4_1_avx2;
    case GgmlType::q5_0: return qdot4_q5_0_avx2;
    case GgmlType::q5_1: return qdot4_q5_1_avx2;
    case GgmlType::q8_0: return qdot4_q8_0_avx2;
    default: return nullptr;
  }
}

QDotKFn qdot_k_ref_kernel(GgmlType t) {
  switch (t) {
    case GgmlType::q4_k: return qdot_q4_k_ref;
    case GgmlType::q5_k: return qdot_q5_k_ref;
    case GgmlType::q6_k: return qdot_q6_k_ref;
    default: return nullptr;
  }
}

QDotKFn qdot_k_avx2_kernel(GgmlType t) {
  switch (t) {
    case GgmlType::q4_k: return qdot_q4_k_avx2;
    case GgmlType::q5_k: return qdot_q5_k_avx2;
    case GgmlType::q6_k: return qdot_q6_k_avx2;
    default: return nullptr;
  }
}

QDot4KFn qdot4_k_avx2_kernel(GgmlType t) {
  switch (t) {
    case GgmlType::q4_k: return qdot4_q4_k_avx2;
    case GgmlType::q5_k: return qdot4_q5_k_avx2;
    case GgmlType::q6_k: return qdot4_q6_k_avx2;
    default: return nullptr;
  }
}

}  // namespace oscar::qmat
