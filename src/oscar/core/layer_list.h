// Lists that give ranges of layers a value, "0-1:int4,27:int8": --kv-layers and the
// rotation files' kv_layers. The items are split, each range parsed and checked and
// overlaps refused here; what the values mean is the caller's.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace oscar {

struct LayerItem {
  int first = 0, last = 0;  // inclusive
  std::string value;        // after the colon, trimmed
  std::string text;         // the item as written, trimmed (for messages)
  std::string item() const;  // "0-1:int4" / "27:int8"
};

// `what` names the list in messages (e.g. "--kv-layers"); n_layers > 0 also checks that
// every layer exists. Throws oscar::Error naming the item for an empty list or item, a
// missing colon, bad or reversed ranges, layers out of range and overlapping items. The
// items come sorted by first layer.
std::vector<LayerItem> parse_layer_list(std::string_view text, int n_layers, std::string_view what);

}  // namespace oscar
