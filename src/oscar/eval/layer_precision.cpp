#include "oscar/eval/layer_precision.h"

#include <fmt/format.h>

#include "oscar/core/error.h"

namespace oscar {

std::vector<int> choose_layer_types(const std::vector<std::vector<LayerTypeCandidate>>& candidates, double budget_bits) {
  const size_t n = candidates.size();
  if (n == 0) fail("per-layer precision: no layers");
  std::vector<int> pick(n);
  double total = 0.0;
  for (size_t l = 0; l < n; ++l) {
    const auto& c = candidates[l];
    if (c.empty()) fail("per-layer precision: layer {} has no candidate types", l);
    int best = 0;
    for (int i = 1; i < int(c.size()); ++i)
      if (c[size_t(i)].bits < c[size_t(best)].bits ||
          (c[size_t(i)].bits == c[size_t(best)].bits && c[size_t(i)].error < c[size_t(best)].error))
        best = i;
    pick[l] = best;
    total += c[size_t(best)].bits;
  }
  const double budget_total = budget_bits * double(n);
  if (total > budget_total + 1e-9)
    fail("KV budget {:.3f} bits per element is below the cheapest choice ({:.3f} bits per element)", budget_bits,
         total / double(n));
  // Squared error is what adds up over layers (noise power); an upgrade is worth its drop
  // in squared error per added bit. Exchanges are re-evaluated after every step, so a
  // layer may climb more than one rung.
  for (;;) {
    double best_gain = 0.0;
    size_t best_l = n;
    int best_i = -1;
    for (size_t l = 0; l < n; ++l) {
      const LayerTypeCandidate& cur = candidates[l][size_t(pick[l])];
      for (int i = 0; i < int(candidates[l].size()); ++i) {
        const LayerTypeCandidate& c = candidates[l][size_t(i)];
        const double extra = c.bits - cur.bits, drop = cur.error * cur.error - c.error * c.error;
        if (extra <= 0.0 || drop <= 0.0 || total + extra > budget_total + 1e-9) continue;
        if (drop / extra > best_gain) best_gain = drop / extra, best_l = l, best_i = i;
      }
    }
    if (best_l == n) break;
    total += candidates[best_l][size_t(best_i)].bits - candidates[best_l][size_t(pick[best_l])].bits;
    pick[best_l] = best_i;
  }
  return pick;
}

std::string kv_layers_string(const std::vector<std::string>& layer_types, const std::string& base) {
  std::string out;
  for (size_t l = 0; l < layer_types.size();) {
    size_t e = l;
    while (e + 1 < layer_types.size() && layer_types[e + 1] == layer_types[l]) ++e;
    if (layer_types[l] != base) {
      if (!out.empty()) out += ",";
      out += e == l ? fmt::format("{}:{}", l, layer_types[l]) : fmt::format("{}-{}:{}", l, e, layer_types[l]);
    }
    l = e + 1;
  }
  return out;
}

}  // namespace oscar
