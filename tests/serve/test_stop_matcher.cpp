// StopMatcher: the concatenated output equals the text cut before the earliest stop
// occurrence however the text is split, and at most a stop's length is ever held back.
#include <gtest/gtest.h>

#include <random>

#include "oscar/serve/stop_matcher.h"

using oscar::serve::StopMatcher;

namespace {

struct Output {
  std::string text;
  bool stopped = false;
};

// Feeds `pieces` in order, then flushes unless stopped.
Output feed(const std::vector<std::string>& stops, const std::vector<std::string>& pieces) {
  StopMatcher m(stops);
  Output out;
  for (const std::string& p : pieces) {
    auto r = m.push(p);
    out.text += r.emit;
    if (r.stopped) {
      out.stopped = true;
      return out;
    }
  }
  out.text += m.flush();
  out.stopped = m.stopped();
  return out;
}

// The reference: the whole text cut before the earliest occurrence of any stop.
Output reference(const std::vector<std::string>& stops, const std::string& text) {
  size_t cut = std::string::npos;
  for (const std::string& s : stops)
    if (!s.empty()) cut = std::min(cut, text.find(s));
  return cut == std::string::npos ? Output{text, false} : Output{text.substr(0, cut), true};
}

}  // namespace

TEST(StopMatcher, NoStopsEmitsEverythingAtOnce) {
  StopMatcher m({});
  auto r = m.push("hello ");
  EXPECT_EQ(r.emit, "hello ");
  EXPECT_FALSE(r.stopped);
  EXPECT_EQ(m.push("world").emit, "world");
  EXPECT_EQ(m.flush(), "");
  EXPECT_FALSE(m.stopped());
}

TEST(StopMatcher, EmptyStopStringsAreIgnored) {
  StopMatcher m({"", ""});
  EXPECT_EQ(m.push("abc").emit, "abc");
}

TEST(StopMatcher, HoldsBackAPossiblePrefixAndReleasesIt) {
  StopMatcher m({"</s>"});
  auto r = m.push("hi <");
  EXPECT_EQ(r.emit, "hi ");
  r = m.push("/");
  EXPECT_EQ(r.emit, "");
  r = m.push("b>");  // "</b>" is not the stop: release all of it
  EXPECT_EQ(r.emit, "</b>");
  EXPECT_FALSE(r.stopped);
}

TEST(StopMatcher, StopSpanningSeveralPushes) {
  StopMatcher m({"STOP"});
  EXPECT_EQ(m.push("abS").emit, "ab");
  EXPECT_EQ(m.push("T").emit, "");
  EXPECT_EQ(m.push("O").emit, "");
  auto r = m.push("Pxyz");
  EXPECT_EQ(r.emit, "");
  EXPECT_TRUE(r.stopped);
  // Nothing after the stop is emitted, ever.
  r = m.push("more");
  EXPECT_EQ(r.emit, "");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(m.flush(), "");
}

TEST(StopMatcher, StopInsideOnePiece) {
  auto r = StopMatcher({"\n\n"}).push("line one\n\nline two");
  EXPECT_EQ(r.emit, "line one");
  EXPECT_TRUE(r.stopped);
}

TEST(StopMatcher, OverlappingPrefix) {
  // "aab" in "aaab": the match starts at 1, so the first "a" must come out.
  for (const auto& pieces : std::vector<std::vector<std::string>>{{"a", "a", "a", "b"}, {"aa", "ab"}, {"aaab"}}) {
    const Output got = feed({"aab"}, pieces);
    EXPECT_EQ(got.text, "a");
    EXPECT_TRUE(got.stopped);
  }
  StopMatcher m({"aab"});
  EXPECT_EQ(m.push("a").emit, "");
  EXPECT_EQ(m.push("a").emit, "");
  EXPECT_EQ(m.push("a").emit, "a");  // "aaa": only the last "aa" can still start the stop
}

TEST(StopMatcher, EarliestStopWins) {
  EXPECT_EQ(feed({"world", "lo"}, {"hello world"}).text, "hel");
  EXPECT_EQ(feed({"lo", "world"}, {"hel", "lo wor", "ld"}).text, "hel");
  // Same start: the cut is the same whichever stop is taken.
  EXPECT_EQ(feed({"bcde", "bc"}, {"abc"}).text, "a");
  EXPECT_TRUE(feed({"bcde", "bc"}, {"abc"}).stopped);
  StopMatcher m({"bcde", "bc"});
  EXPECT_TRUE(m.push("abc").stopped);  // no need to wait for "bcde"
}

TEST(StopMatcher, CompleteShortStopWaitsForLongerEarlierOne) {
  // "bc" is complete after "abc", but "abcd" could still start at 0.
  StopMatcher m({"abcd", "bc"});
  auto r = m.push("abc");
  EXPECT_EQ(r.emit, "");
  EXPECT_FALSE(r.stopped);
  r = m.push("d");
  EXPECT_EQ(r.emit, "");
  EXPECT_TRUE(r.stopped);

  StopMatcher m2({"abcd", "bc"});
  EXPECT_FALSE(m2.push("abc").stopped);
  r = m2.push("e");  // "abcd" failed: "bc" at 1 wins
  EXPECT_EQ(r.emit, "a");
  EXPECT_TRUE(r.stopped);

  // Generation ends while waiting: the flushed tail is cut before "bc".
  StopMatcher m3({"abcd", "bc"});
  EXPECT_EQ(m3.push("xabc").emit, "x");
  EXPECT_EQ(m3.flush(), "a");
  EXPECT_TRUE(m3.stopped());
}

TEST(StopMatcher, FlushReturnsTheHeldTail) {
  StopMatcher m({"<|end|>"});
  EXPECT_EQ(m.push("done <|en").emit, "done ");
  EXPECT_EQ(m.flush(), "<|en");
  EXPECT_FALSE(m.stopped());
}

TEST(StopMatcher, MultiByteStop) {
  const std::string stop = "\xE2\x80\x94";  // U+2014 em dash
  EXPECT_EQ(feed({stop}, {"a\xE2", "\x80", "\x94z"}).text, "a");
  EXPECT_EQ(feed({stop}, {"a\xE2", "\x80", "z"}).text, "a\xE2\x80z");
}

TEST(StopMatcher, RandomSplitsMatchReference) {
  std::mt19937 rng(42);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  auto random_text = [&](int len, const std::string& alphabet) {
    std::string s;
    for (int i = 0; i < len; ++i) s += alphabet[size_t(pick(0, int(alphabet.size()) - 1))];
    return s;
  };
  for (int trial = 0; trial < 20000; ++trial) {
    // A small alphabet makes matches, overlaps and nested stops common.
    const std::string alphabet = trial % 3 == 0 ? "ab" : trial % 3 == 1 ? "abc" : "abcdefgh";
    const std::string text = random_text(pick(0, 48), alphabet);
    std::vector<std::string> stops;
    const int n_stops = pick(0, 4);
    size_t max_len = 0;
    for (int i = 0; i < n_stops; ++i) {
      // Half of the stops are cut from the text itself so that most texts stop somewhere.
      std::string s = random_text(pick(1, 5), alphabet);
      if (pick(0, 1) == 0 && !text.empty()) {
        const int at = pick(0, int(text.size()) - 1);
        s = text.substr(size_t(at), size_t(pick(1, 6)));
      }
      max_len = std::max(max_len, s.size());
      stops.push_back(s);
    }

    StopMatcher m(stops);
    std::string out;
    bool stopped = false;
    size_t received = 0;
    for (size_t pos = 0; pos < text.size() && !stopped;) {
      const size_t len = std::min(text.size() - pos, size_t(pick(0, 7)));  // empty pieces too
      auto r = m.push(std::string_view(text).substr(pos, len));
      pos += len;
      received += len;
      out += r.emit;
      stopped = r.stopped;
      if (!stopped) {
        ASSERT_LT(received - out.size(), std::max<size_t>(max_len, 1)) << "held back too much";
      }
    }
    if (!stopped) {
      out += m.flush();
      stopped = m.stopped();
    }
    const Output ref = reference(stops, text);
    ASSERT_EQ(out, ref.text) << "trial " << trial << " text '" << text << "'";
    ASSERT_EQ(stopped, ref.stopped) << "trial " << trial << " text '" << text << "'";
  }
}
