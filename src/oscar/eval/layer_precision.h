// Per-layer KV precision under a memory budget (`oscar calibrate --kv-budget BITS`):
// given each layer's measured attention-output error for a few KV types and their bits
// per element, pick one type per layer so that the layers' mean bits stay within the
// budget and the summed squared error is as small as a greedy exchange can make it.
#pragma once
#include <string>
#include <vector>

namespace oscar {

struct LayerTypeCandidate {
  std::string type;    // a --kv-layers type name, e.g. "int4"
  double bits = 0.0;   // history bits per element of this type at this layer
  double error = 0.0;  // measured relative L2 error of the layer's attention output
};

// candidates[l]: the options for layer l (at least one each). Starts every layer at its
// cheapest option (the least error among equally cheap ones), then repeatedly takes the
// upgrade with the largest drop in squared error per added bit that still fits
// mean bits ≤ budget_bits. Returns the chosen index per layer. Throws oscar::Error when
// even the cheapest choice exceeds the budget or a layer has no candidates.
std::vector<int> choose_layer_types(const std::vector<std::vector<LayerTypeCandidate>>& candidates, double budget_bits);

// "0-1:int4,27:int8": the layers whose type differs from `base`, as inclusive ranges of
// equal types, in the --kv-layers syntax ("" when every layer is `base`).
std::string kv_layers_string(const std::vector<std::string>& layer_types, const std::string& base);

}  // namespace oscar
