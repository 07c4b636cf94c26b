// The mixed cache's window rule, the one definition both backends use: a sequence of length t
// keeps the sink [0, S), the quantized history [S, h) and the full-precision recent rows
// [h, t), with h = S + T·⌊max(0, t − S − W) / T⌋ (T: rows demoted at a time, 1 except KIVI).
// Plain C++ with no includes, so that nvcc compiles it into the CUDA cache too.
#pragma once
#include <cstdint>

namespace oscar {

// h(t) ≥ S: for t ≤ S + W the history [S, h) is empty. (KvSpec::history_end clamps it to t
// for t < S, where the CPU cache counts the sink's rows as the sequence's only rows.)
constexpr int64_t history_boundary(int64_t t, int64_t sink, int64_t window, int64_t demote_tokens = 1) {
  const int64_t excess = t - sink - window > 0 ? t - sink - window : 0;
  return sink + demote_tokens * (excess / demote_tokens);
}

}  // namespace oscar
