#include "oscar/core/layer_list.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>

#include "oscar/core/error.h"

namespace oscar {

namespace {
std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool parse_layer(std::string_view s, int* out) {
  s = trim(s);
  if (s.empty() || s.size() > 6) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), *out);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}
}  // namespace

std::string LayerItem::item() const {
  return first == last ? fmt::format("{}:{}", first, value) : fmt::format("{}-{}:{}", first, last, value);
}

std::vector<LayerItem> parse_layer_list(std::string_view text, int n_layers, std::string_view what) {
  std::vector<LayerItem> out;
  if (trim(text).empty()) fail("{}: empty list (want e.g. \"0-1:int4,27:int8\")", what);
  size_t pos = 0;
  for (int index = 1;; ++index) {
    const size_t comma = text.find(',', pos);
    const std::string_view item = trim(text.substr(pos, comma == std::string_view::npos ? std::string_view::npos : comma - pos));
    if (item.empty()) fail("{}: item {} of '{}' is empty", what, index, text);
    const size_t colon = item.find(':');
    if (colon == std::string_view::npos) fail("{} item '{}': expected LAYERS:TYPE (e.g. 0-1:int4 or 27:int8)", what, item);
    const std::string_view range = trim(item.substr(0, colon));
    LayerItem t;
    t.value = std::string(trim(item.substr(colon + 1)));
    t.text = std::string(item);
    const size_t dash = range.find('-');
    const bool ok = dash == std::string_view::npos
                        ? parse_layer(range, &t.first) && (t.last = t.first, true)
                        : parse_layer(range.substr(0, dash), &t.first) && parse_layer(range.substr(dash + 1), &t.last);
    if (!ok) fail("{} item '{}': bad layers '{}' (want N or A-B, layer numbers from 0)", what, item, range);
    if (t.first > t.last) fail("{} item '{}': range {}-{} is reversed", what, item, t.first, t.last);
    if (n_layers > 0 && t.last >= n_layers)
      fail("{} item '{}': layer {} out of range (the model has {} layers, 0-{})", what, item, t.last, n_layers,
           n_layers - 1);
    out.push_back(std::move(t));
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
  std::stable_sort(out.begin(), out.end(), [](const LayerItem& a, const LayerItem& b) { return a.first < b.first; });
  for (size_t i = 1; i < out.size(); ++i)
    if (out[i].first <= out[i - 1].last)
      fail("{} items '{}' and '{}' overlap (layer {})", what, out[i - 1].item(), out[i].item(), out[i].first);
  return out;
}

}  // namespace oscar
