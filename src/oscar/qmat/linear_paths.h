// The two designs behind linear() for non-F32 weights, callable on their own so that
// tests cover both and a timing program can measure the crossover that linear() uses.
#pragma once
#include <cstdint>

#include "oscar/qmat/weight_matrix.h"

namespace oscar::qmat {

// (a) Row kernels: qdot (block formats, x rows quantized once) or fdot (F16 / BF16), each
// output bit-identical to the m = 1 result; threaded over weight rows. What linear_decode runs.
void linear_rows(const WeightMatrix& w, const float* x, const float* bias, float* y, int64_t m);

// (b) Panels of at most panel_rows weight rows dequantized to f32 (threaded), each then
// multiplied by OpenBLAS sgemm from the calling thread. panel_rows <= 0: the default cap.
void linear_panels(const WeightMatrix& w, const float* x, const float* bias, float* y, int64_t m,
                   int64_t panel_rows = 0);

// Whether (b) is the faster design for this shape (always false for F32 and for m = 1).
// linear() does not take it today: (a) is exact per row, which the server's batching needs.
bool linear_prefers_panels(GgmlType t, int64_t m, int64_t k, int64_t n);

}  // namespace oscar::qmat
