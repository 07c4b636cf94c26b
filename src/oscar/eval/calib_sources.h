// Calibration text from several sources (issue 26): `-f PATH[:WEIGHT]` specs and the
// corpus manifest of scripts/corpus.py, chat .jsonl rendered through the model's own
// template, and the cut of a token budget into equal prompts shared among the sources in
// proportion to their weights. Lives in eval (not calib) because it needs the tokenizer.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "oscar/text/chat_template.h"
#include "oscar/text/tokenizer.h"

namespace oscar {

// One calibration text and its share of the prompts (and so of the tokens).
struct CalibSource {
  std::string path;
  double weight = 1.0;  // > 0; shares are weight / Σ weights
  std::string domain;   // the corpus manifest's "domain"; "" for a plain -f
};

// "PATH[:WEIGHT]" (weight 1 when absent). An argument that names an existing file is a path
// as a whole, so paths holding ':' work. Throws oscar::Error for a weight that is not a
// finite number > 0 and for a file that does not exist.
CalibSource parse_calib_source(std::string_view arg);

// The calibration files of a corpus directory written by scripts/corpus.py: every entry of
// DIR/manifest.json with role "calib", in manifest order, path DIR/<file>, weight from an
// optional "weight" (default 1), domain from "domain". Throws oscar::Error naming the
// manifest (missing, not JSON, no calib entries, bad fields).
std::vector<CalibSource> corpus_calib_sources(const std::string& dir);
// The "sha256" the corpus manifest records for `path` (as corpus_calib_sources spells it); "" if none.
std::string corpus_manifest_sha256(const std::string& dir, const std::string& path);

// One conversation per non-empty line: a JSON list of {"role": "system"|"user"|"assistant",
// "content": string}. Throws oscar::Error "<path>:<line>: <what is wrong>".
std::vector<std::vector<ChatMessage>> parse_chat_jsonl(std::string_view text, const std::string& path);

// A source as one token stream. doc_starts: where each conversation of a .jsonl begins
// (prompt windows start there when they can); empty for plain text.
struct SourceTokens {
  std::vector<int32_t> ids;
  std::vector<int64_t> doc_starts;
};

// Plain text: encode(text, no BOS, no special tokens), as calibration always did. A path
// ending in ".jsonl": each conversation rendered by apply_chat_template(kind, msgs, false,
// default_system) (with `none`, the contents joined by newlines) and encoded with the
// tokenizer's BOS and special tokens, like `run --chat`; the conversations concatenated.
SourceTokens tokenize_calib_source(const Tokenizer& tok, ChatTemplateKind kind, const std::string& default_system,
                                   const std::string& path);

// Largest-remainder apportionment of n among the weights (ties to the earlier source); with
// at_least_one, every source gets one first (n must be ≥ weights.size()). Σ result = n.
std::vector<int64_t> apportion(std::span<const double> weights, int64_t n, bool at_least_one);

// The starts of n windows of len tokens evenly spaced through a stream of `total` tokens:
// window j at floor(j · total / n), moved forward to the next of doc_starts (sorted) when the
// window still fits there. Needs n · len ≤ total.
std::vector<int64_t> window_starts(int64_t total, int64_t n, int64_t len, std::span<const int64_t> doc_starts);

// What a calibration run takes from each source.
struct CalibSourceUse {
  int64_t prompts = 0, tokens = 0;  // fitted on: prompts · per_prompt tokens
  int64_t probe_tokens = 0;         // handed to the searches (tokens the fit did not see)
  std::vector<int64_t> starts;      // window starts in the source's token stream
};

struct CalibMix {
  std::vector<int32_t> ids;  // [prompts · per_prompt] fitted tokens (prompt p at p · per_prompt), then the probe
  int64_t per_prompt = 0;
  int64_t prompts = 0;
  std::vector<CalibSourceUse> use;  // per source
};

// Cuts `tokens` into `prompts` prompts of tokens / prompts each and shares them among the
// sources by weight (apportion, at least one prompt each); each source gives its prompts as
// evenly spaced windows (window_starts) and, after its first window, its share of
// probe_tokens. The probe shares follow the prompts, cut into pieces of probe_piece tokens
// and interleaved so that the stream ends with one piece of each source: the searches score
// their last queries, which then come from every domain, not only the last source's. One
// source keeps the historical cut: the first min(tokens, its size) tokens in prompts of equal
// length from its start, ids = the whole stream (the searches probe the tokens that follow).
// Throws oscar::Error naming the source that is too short.
CalibMix mix_calib_sources(std::span<const CalibSource> sources, std::span<const SourceTokens> toks, int64_t tokens,
                           int64_t prompts, int64_t probe_tokens, int64_t probe_piece);

// Lower-case hex SHA-256 of a file's bytes; throws oscar::Error when it cannot be read.
std::string file_sha256(const std::string& path);

}  // namespace oscar
