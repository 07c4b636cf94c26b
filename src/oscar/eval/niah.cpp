#include "oscar/eval/niah.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <set>

#include "oscar/core/error.h"
#include "oscar/engine/generate.h"
#include "oscar/sampling/sampler.h"

namespace oscar {

namespace {

// Common words, as RULER draws its keys from a word list: short, single-token-ish,
// and never digits, so a key can not be mistaken for the answer.
constexpr std::array<const char*, 32> kAdjectives = {
    "bright", "quiet",  "golden", "silver", "ancient", "gentle", "hollow", "rapid",  "frozen", "hidden", "lucky",
    "purple", "silent", "sturdy", "tender", "velvet",  "wild",   "yellow", "brave",  "calm",   "clever", "distant",
    "eager",  "fancy",  "grand",  "humble", "jolly",   "modern", "narrow", "proud",  "rustic", "sunny"};
constexpr std::array<const char*, 32> kNouns = {
    "river",  "mountain", "garden", "lantern", "harbor", "meadow", "castle", "forest", "window", "bridge", "candle",
    "desert", "island",   "jacket", "kitchen", "ladder", "mirror", "needle", "orchard", "pillow", "rabbit", "saddle",
    "teapot", "valley",   "wagon",  "anchor",  "basket", "cloud",  "dragon", "engine", "falcon", "tunnel"};

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

// The sentence boundary nearest byte p: just past a '.' and the whitespace after it.
// npos when the text has none.
size_t nearest_sentence_start(std::string_view s, size_t p) {
  size_t best = std::string_view::npos, best_dist = std::string_view::npos;
  for (size_t i = 0; i + 1 < s.size(); ++i) {
    if (s[i] != '.' || !is_space(s[i + 1])) continue;
    size_t b = i + 1;
    while (b < s.size() && is_space(s[b])) ++b;
    const size_t dist = b > p ? b - p : p - b;
    if (dist < best_dist) best = b, best_dist = dist;
    i = b - 1;
  }
  return best;
}

// Drops a UTF-8 character cut off at the end (a token prefix can end inside one).
void trim_partial_utf8(std::string& s) {
  for (size_t back = 1; back <= 4 && back <= s.size(); ++back) {
    const auto c = static_cast<unsigned char>(s[s.size() - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
    const size_t need = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 1;
    if (back < need) s.erase(s.size() - back);  // erase, not resize: GCC 12 -Wrestrict false positive
    return;
  }
}

std::vector<int32_t> encode_prompt(const Tokenizer& tok, const std::string& text, bool add_bos) {
  std::vector<int32_t> ids = tok.encode(text, add_bos, /*parse_special=*/true);
  // Llama 3's template writes <|begin_of_text|> itself; with add_bos it would appear twice.
  if (add_bos && ids.size() >= 2 && ids[0] == tok.bos_id() && ids[1] == tok.bos_id()) ids.erase(ids.begin());
  return ids;
}

}  // namespace

NiahNeedle random_needle(std::mt19937_64& rng) {
  std::uniform_int_distribution<size_t> adj(0, kAdjectives.size() - 1), noun(0, kNouns.size() - 1);
  std::uniform_int_distribution<int> value(1000000, 9999999);
  NiahNeedle n;
  n.key = std::string(kAdjectives[adj(rng)]) + "-" + kNouns[noun(rng)];
  n.value = std::to_string(value(rng));
  return n;
}

std::string needle_sentence(const NiahNeedle& n) {
  return "One of the special magic numbers for " + n.key + " is: " + n.value + ".";
}

std::string insert_needle(std::string_view hay, std::string_view sentence, double depth_percent) {
  if (!(depth_percent >= 0.0 && depth_percent <= 100.0)) fail("needle depth {} is outside 0..100 percent", depth_percent);
  size_t at = 0;
  if (depth_percent >= 100.0) {
    at = hay.size();
  } else if (depth_percent > 0.0) {
    const size_t p = std::min(hay.size(), size_t(std::llround(depth_percent / 100.0 * double(hay.size()))));
    at = nearest_sentence_start(hay, p);
    if (at == std::string_view::npos) {  // no sentence end: the point itself, not inside a character
      at = p;
      while (at > 0 && at < hay.size() && (static_cast<unsigned char>(hay[at]) & 0xC0) == 0x80) --at;
    }
  }
  std::string out;
  out.reserve(hay.size() + sentence.size() + 2);
  out.append(hay.substr(0, at));
  if (at > 0 && !is_space(hay[at - 1])) out += ' ';
  out.append(sentence);
  if (at < hay.size() && !is_space(hay[at])) out += ' ';
  out.append(hay.substr(at));
  return out;
}

std::string niah_prompt_text(const NiahFormat& f, const NiahNeedle& needle, std::string_view haystack_with_needle) {
  std::string user =
      "Some special magic numbers are hidden within the following text. Make sure to memorize it. "
      "I will quiz you about the numbers afterwards.\n";
  user.append(haystack_with_needle);
  user += "\nWhat is the special magic number for " + needle.key + " mentioned in the provided text?";
  const ChatMessage msgs[] = {{"user", std::move(user)}};
  std::string text = apply_chat_template(f.chat, msgs, /*add_generation_prompt=*/true, f.default_system);
  if (f.chat == ChatTemplateKind::none) text += "\n";  // raw: the answer starts on its own line
  text += "The special magic number for " + needle.key + " mentioned in the provided text is";
  return text;
}

NiahPrompt build_niah_prompt(const Tokenizer& tok, std::span<const int32_t> haystack_ids, const NiahNeedle& needle,
                             double depth_percent, int64_t target_tokens, const NiahFormat& f) {
  if (haystack_ids.empty()) fail("niah: the haystack text has no tokens");
  const std::string sentence = needle_sentence(needle);
  std::vector<int32_t> filler;
  auto build = [&](int64_t n) {
    filler.resize(size_t(n));
    for (int64_t i = 0; i < n; ++i) filler[size_t(i)] = haystack_ids[size_t(i) % haystack_ids.size()];
    std::string hay = tok.decode(filler, /*render_control=*/false);
    trim_partial_utf8(hay);
    NiahPrompt p;
    p.text = niah_prompt_text(f, needle, insert_needle(hay, sentence, depth_percent));
    p.ids = encode_prompt(tok, p.text, f.add_bos);
    p.haystack_tokens = n;
    return p;
  };
  NiahPrompt best = build(0);
  const int64_t bare = int64_t(best.ids.size());
  if (bare > target_tokens)
    fail("niah: a length of {} tokens is too short: the prompt without any haystack already has {} tokens",
         target_tokens, bare);
  // Decoding a token prefix and tokenizing it inside the prompt gives nearly the same
  // count (tokens merge or split only at the seams and around the needle), so a few
  // corrections converge; keep the longest prompt that does not exceed the target.
  std::set<int64_t> tried = {0};
  int64_t n = target_tokens - bare;
  for (int iter = 0; iter < 12 && int64_t(best.ids.size()) != target_tokens; ++iter) {
    if (!tried.insert(n).second) break;
    NiahPrompt p = build(n);
    const int64_t len = int64_t(p.ids.size());
    if (len <= target_tokens && len > int64_t(best.ids.size())) best = std::move(p);
    const int64_t step = target_tokens - len;
    if (step == 0) break;
    int64_t next = std::max<int64_t>(0, n + step);
    if (tried.count(next)) next = std::max<int64_t>(0, n + (step > 0 ? 1 : -1));  // cycling: walk by one
    n = next;
  }
  return best;
}

bool niah_correct(std::string_view generated, std::string_view value) {
  if (value.empty()) return false;
  for (size_t i = 0; i < generated.size();) {
    if (!is_digit(generated[i])) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < generated.size() && is_digit(generated[j])) ++j;
    if (generated.substr(i, j - i) == value) return true;
    i = j;
  }
  return false;
}

NiahGeneration niah_generate(engine::Runner& runner, const Tokenizer& tok, SeqId seq, std::span<const int32_t> prompt,
                             int max_new, int prefill_chunk) {
  OSCAR_CHECK(prefill_chunk > 0, "prefill chunk {}", prefill_chunk);
  if (prompt.empty()) fail("niah: the prompt is empty");
  SamplerParams greedy;  // the first largest logit
  greedy.temperature = 0.0f;
  greedy.repeat_penalty = 1.0f;
  Sampler sampler(greedy);
  NiahGeneration out;
  const engine::GenerationStats st = engine::generate(
      runner, tok, seq, prompt, max_new, sampler, [&](int32_t id) { return out.ids.push_back(id), true; }, prefill_chunk);
  const KvShape shape = runner.kv_shape();
  out.kv_bits_per_element =
      8.0 * double(st.kv_bytes_after_prompt) / (2.0 * shape.n_layers * shape.n_kv_heads * shape.head_dim * double(prompt.size()));
  out.text = tok.decode(out.ids, /*render_control=*/false);
  return out;
}

}  // namespace oscar
