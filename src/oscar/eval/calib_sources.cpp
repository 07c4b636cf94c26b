#include "oscar/eval/calib_sources.h"

#include <openssl/evp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>

#include "oscar/core/error.h"
#include "oscar/core/read_file.h"

namespace oscar {

namespace {

namespace fs = std::filesystem;


bool ends_with(std::string_view s, std::string_view tail) {
  return s.size() >= tail.size() && s.substr(s.size() - tail.size()) == tail;
}

double parse_weight(std::string_view w, std::string_view arg) {
  const std::string s(w);
  char* end = nullptr;
  const double v = s.empty() ? NAN : std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(v) || v <= 0.0)
    fail("-f '{}': the weight '{}' is not a number > 0 (PATH[:WEIGHT])", arg, w);
  return v;
}

nlohmann::json read_manifest(const std::string& dir) {
  const std::string mf = (fs::path(dir) / "manifest.json").string();
  if (!fs::is_regular_file(mf))
    fail("no corpus manifest '{}': install the corpus with `bash scripts/fetch-corpus.sh`", mf);
  try {
    return nlohmann::json::parse(read_text_file(mf, "corpus manifest "));
  } catch (const nlohmann::json::exception& e) {
    fail("corpus manifest '{}' is not valid JSON: {}", mf, e.what());
  }
}

}  // namespace

CalibSource parse_calib_source(std::string_view arg) {
  CalibSource s;
  s.path = std::string(arg);
  if (arg.empty()) fail("-f: empty calibration file name");
  if (!fs::is_regular_file(s.path)) {
    const size_t colon = arg.rfind(':');
    if (colon != std::string_view::npos && colon > 0) {
      s.path = std::string(arg.substr(0, colon));
      s.weight = parse_weight(arg.substr(colon + 1), arg);
    }
    if (!fs::is_regular_file(s.path)) fail("-f '{}': calibration file '{}' does not exist", arg, s.path);
  }
  return s;
}

std::vector<CalibSource> corpus_calib_sources(const std::string& dir) {
  const nlohmann::json m = read_manifest(dir);
  const std::string mf = (fs::path(dir) / "manifest.json").string();
  if (!m.is_object() || !m.contains("files") || !m["files"].is_array()) fail("corpus manifest '{}' has no \"files\" list", mf);
  std::vector<CalibSource> out;
  for (size_t i = 0; i < m["files"].size(); ++i) {
    const nlohmann::json& f = m["files"][i];
    if (!f.is_object() || !f.contains("file") || !f["file"].is_string() || !f.contains("role") || !f["role"].is_string())
      fail("corpus manifest '{}': files[{}] needs string \"file\" and \"role\"", mf, i);
    if (f["role"] != "calib") continue;
    CalibSource s;
    s.path = (fs::path(dir) / f["file"].get<std::string>()).string();
    if (f.contains("domain") && f["domain"].is_string()) s.domain = f["domain"].get<std::string>();
    if (f.contains("weight")) {
      if (!f["weight"].is_number() || !std::isfinite(f["weight"].get<double>()) || f["weight"].get<double>() <= 0)
        fail("corpus manifest '{}': files[{}] ({}) has a weight that is not a number > 0", mf, i, s.path);
      s.weight = f["weight"].get<double>();
    }
    if (!fs::is_regular_file(s.path))
      fail("corpus file '{}' is missing: reinstall the corpus with `bash scripts/fetch-corpus.sh --force`", s.path);
    out.push_back(std::move(s));
  }
  if (out.empty()) fail("corpus manifest '{}' lists no file with role \"calib\"", mf);
  return out;
}

std::string corpus_manifest_sha256(const std::string& dir, const std::string& path) {
  const nlohmann::json m = read_manifest(dir);
  if (!m.contains("files") || !m["files"].is_array()) return "";
  for (const nlohmann::json& f : m["files"])
    if (f.is_object() && f.value("file", "") != "" && (fs::path(dir) / f.value("file", "")).string() == path)
      return f.contains("sha256") && f["sha256"].is_string() ? f["sha256"].get<std::string>() : "";
  return "";
}

std::vector<std::vector<ChatMessage>> parse_chat_jsonl(std::string_view text, const std::string& path) {
  std::vector<std::vector<ChatMessage>> out;
  size_t line_no = 0, pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      fail("{}:{}: not valid JSON ({})", path, line_no, e.what());
    }
    if (!j.is_array() || j.empty()) fail("{}:{}: expected a non-empty JSON list of {{\"role\", \"content\"}} messages", path, line_no);
    std::vector<ChatMessage> conv;
    for (size_t k = 0; k < j.size(); ++k) {
      const nlohmann::json& msg = j[k];
      if (!msg.is_object() || !msg.contains("role") || !msg["role"].is_string() || !msg.contains("content") ||
          !msg["content"].is_string())
        fail("{}:{}: message {} needs string \"role\" and \"content\"", path, line_no, k + 1);
      const std::string role = msg["role"].get<std::string>();
      if (role != "system" && role != "user" && role != "assistant")
        fail("{}:{}: message {} has role '{}' (expected system, user or assistant)", path, line_no, k + 1, role);
      conv.push_back({role, msg["content"].get<std::string>()});
    }
    out.push_back(std::move(conv));
  }
  if (out.empty()) fail("{}: no conversations", path);
  return out;
}

SourceTokens tokenize_calib_source(const Tokenizer& tok, ChatTemplateKind kind, const std::string& default_system,
                                   const std::string& path) {
  const std::string text = read_text_file(path, "calibration text ");
  SourceTokens st;
  if (!ends_with(path, ".jsonl")) {
    st.ids = tok.encode(text, false, false);
    return st;
  }
  for (const std::vector<ChatMessage>& conv : parse_chat_jsonl(text, path)) {
    const std::string rendered = apply_chat_template(kind, conv, /*add_generation_prompt=*/false, default_system);
    const std::vector<int32_t> ids = tok.encode(rendered, tok.add_bos(), /*parse_special=*/true);
    st.doc_starts.push_back(int64_t(st.ids.size()));
    st.ids.insert(st.ids.end(), ids.begin(), ids.end());
  }
  return st;
}

std::vector<int64_t> apportion(std::span<const double> weights, int64_t n, bool at_least_one) {
  const size_t k = weights.size();
  std::vector<int64_t> out(k, at_least_one ? 1 : 0);
  if (k == 0) return out;
  OSCAR_CHECK(!at_least_one || n >= int64_t(k), "apportion: fewer items than sources");
  const int64_t rest = n - (at_least_one ? int64_t(k) : 0);
  // Each source's ideal share of all n, less what it already holds, spread over the rest.
  const double total = std::accumulate(weights.begin(), weights.end(), 0.0);
  std::vector<double> want(k);
  double want_sum = 0.0;
  for (size_t i = 0; i < k; ++i) {
    want[i] = std::max(0.0, double(n) * weights[i] / total - double(out[i]));
    want_sum += want[i];
  }
  std::vector<double> rem(k);
  int64_t given = 0;
  for (size_t i = 0; i < k; ++i) {
    const double q = want_sum > 0 ? double(rest) * want[i] / want_sum : 0.0;
    const int64_t f = int64_t(std::floor(q));
    out[i] += f;
    given += f;
    rem[i] = q - double(f);
  }
  std::vector<size_t> order(k);
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return rem[a] > rem[b]; });
  for (size_t j = 0; given < rest; j = (j + 1) % k, ++given) ++out[order[j]];
  return out;
}

std::vector<int64_t> window_starts(int64_t total, int64_t n, int64_t len, std::span<const int64_t> doc_starts) {
  OSCAR_CHECK(n >= 0 && len >= 0 && n * len <= total, "window_starts: windows do not fit");
  std::vector<int64_t> out;
  for (int64_t j = 0; j < n; ++j) {
    int64_t s = j * total / n;
    const auto it = std::lower_bound(doc_starts.begin(), doc_starts.end(), s);
    // A later window must not start inside the next one's span, nor run past the end.
    const int64_t limit = std::min(total, j + 1 < n ? (j + 1) * total / n : total);
    if (it != doc_starts.end() && *it + len <= limit) s = *it;
    out.push_back(s);
  }
  return out;
}

CalibMix mix_calib_sources(std::span<const CalibSource> sources, std::span<const SourceTokens> toks, int64_t tokens,
                           int64_t prompts, int64_t probe_tokens, int64_t probe_piece) {
  OSCAR_CHECK(sources.size() == toks.size() && !sources.empty(), "mix_calib_sources: one token stream per source");
  if (prompts < 1 || tokens < prompts) fail("--tokens {} must be at least --prompts {}", tokens, prompts);
  CalibMix mix;
  mix.prompts = prompts;
  mix.use.resize(sources.size());
  if (sources.size() == 1) {  // the historical cut: the text's first tokens, in order
    const std::vector<int32_t>& ids = toks[0].ids;
    mix.per_prompt = std::min<int64_t>(tokens, int64_t(ids.size())) / prompts;
    if (mix.per_prompt < 2)
      fail("calibration text '{}' has only {} tokens for {} prompts", sources[0].path, ids.size(), prompts);
    mix.ids = ids;
    CalibSourceUse& u = mix.use[0];
    u.prompts = prompts;
    u.tokens = prompts * mix.per_prompt;
    for (int64_t p = 0; p < prompts; ++p) u.starts.push_back(p * mix.per_prompt);
    u.probe_tokens = std::min<int64_t>(probe_tokens, int64_t(ids.size()) - u.tokens);
    return mix;
  }
  if (prompts < int64_t(sources.size()))
    fail("--prompts {} is fewer than the {} calibration sources (each needs at least one prompt)", prompts,
         sources.size());
  mix.per_prompt = tokens / prompts;
  if (mix.per_prompt < 2) fail("--tokens {} gives fewer than 2 tokens to each of --prompts {}", tokens, prompts);
  std::vector<double> w;
  for (const CalibSource& s : sources) w.push_back(s.weight);
  const std::vector<int64_t> n_prompts = apportion(w, prompts, /*at_least_one=*/true);
  const std::vector<int64_t> n_probe = apportion(w, std::max<int64_t>(probe_tokens, 0), /*at_least_one=*/false);
  const int64_t len = mix.per_prompt;
  mix.ids.reserve(size_t(prompts * len + std::max<int64_t>(probe_tokens, 0)));
  std::vector<std::pair<int64_t, int64_t>> probes;  // per source: [from, to) in its stream
  for (size_t i = 0; i < sources.size(); ++i) {
    const std::vector<int32_t>& ids = toks[i].ids;
    const int64_t n = n_prompts[i], total = int64_t(ids.size());
    if (n * len > total)
      fail("calibration source '{}' has {} tokens, fewer than its share of {} prompts of {} tokens ({}); lower "
           "--tokens or its weight",
           sources[i].path, total, n, len, n * len);
    CalibSourceUse& u = mix.use[i];
    u.prompts = n;
    u.tokens = n * len;
    u.starts = window_starts(total, n, len, toks[i].doc_starts);
    for (int64_t s : u.starts) mix.ids.insert(mix.ids.end(), ids.begin() + s, ids.begin() + s + len);
    // The probe: the tokens right after the first window, up to the second one.
    const int64_t from = u.starts[0] + len, limit = n > 1 ? u.starts[1] : total;
    u.probe_tokens = std::clamp<int64_t>(limit - from, 0, n_probe[i]);
    probes.emplace_back(from, from + u.probe_tokens);
  }
  // The probe: each source's tokens cut into pieces of probe_piece (its first piece takes the
  // remainder), dealt round-robin from the end, so that the last pieces (where the searches
  // score their queries) are one of each source, in source order.
  OSCAR_CHECK(probe_piece > 0, "probe_piece = {}", probe_piece);
  std::vector<std::pair<int64_t, int64_t>> dealt;  // [from, to) in source i's stream, last piece first
  std::vector<size_t> owner;
  std::vector<int64_t> left;  // per source: end of its not yet dealt probe tokens
  for (const auto& pr : probes) left.push_back(pr.second);
  for (bool any = true; any;) {
    any = false;
    for (size_t i = sources.size(); i-- > 0;) {
      if (left[i] <= probes[i].first) continue;
      const int64_t from = std::max(probes[i].first, left[i] - probe_piece);
      dealt.emplace_back(from, left[i]);
      owner.push_back(i);
      left[i] = from;
      any = true;
    }
  }
  for (size_t k = dealt.size(); k-- > 0;) {
    const std::vector<int32_t>& ids = toks[owner[k]].ids;
    mix.ids.insert(mix.ids.end(), ids.begin() + dealt[k].first, ids.begin() + dealt[k].second);
  }
  return mix;
}

std::string file_sha256(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot read '{}'", path);
  const std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  OSCAR_CHECK(ctx && EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) == 1, "SHA-256 init failed");
  std::vector<char> buf(1 << 16);
  while (in) {
    in.read(buf.data(), std::streamsize(buf.size()));
    if (in.gcount() > 0) OSCAR_CHECK(EVP_DigestUpdate(ctx.get(), buf.data(), size_t(in.gcount())) == 1, "SHA-256 failed");
  }
  if (in.bad()) fail("cannot read '{}'", path);
  unsigned char md[32];
  unsigned int len = 0;
  OSCAR_CHECK(EVP_DigestFinal_ex(ctx.get(), md, &len) == 1 && len == 32, "SHA-256 failed");
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned char b : md) out += hex[b >> 4], out += hex[b & 15];
  return out;
}

}  // namespace oscar
