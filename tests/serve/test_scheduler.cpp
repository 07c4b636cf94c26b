// The scheduler on a CpuRunner over a tiny random model: every request finishes with its
// tokens; concurrent greedy requests give what each gives alone (engine::generate on a
// fresh cache); a KV budget too small for all of them at once queues the rest (output
// reserve 1) or preempts (reserve 0) and still finishes everything: swapped out and back
// with the same greedy text as alone, or recomputed (the prefix cache on or off) from the
// pages a preempted sequence left there; cancelling frees the pages;
// max_tokens and the context end as "length".
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "../tiny_model.h"
#include "../tiny_tokenizer.h"
#include "oscar/engine/cpu_runner.h"
#include "oscar/engine/generate.h"
#include "oscar/serve/scheduler.h"

namespace oscar::serve {
namespace {

using test::tiny_tokenizer;

Transformer tiny(const std::string& kv, int sink = 4, int recent = 8) {
  Transformer t(test::tiny_model(true, 11, 2, 16));
  t.configure_kv(test::tiny_kv_spec(kv, sink, recent, 16));
  return t;
}

GenerationInput input(int i, int64_t max_new) {
  GenerationInput in;
  for (int j = 0; j < 5 + 7 * i; ++j) in.prompt.push_back(int32_t((i * 17 + j * 3) % 50));
  in.max_new_tokens = max_new;
  in.sampling.temperature = 0;
  return in;
}

// Greedy text of one request alone, through the one generation loop.
std::string alone(Transformer& t, const Tokenizer& tok, const GenerationInput& in) {
  engine::CpuRunner r(t, t.make_cache(4096));
  const SeqId s = r.add_sequence();
  Sampler sampler(in.sampling);
  std::string text;
  engine::generate(r, tok, s, in.prompt, int(in.max_new_tokens), sampler, [&](int32_t id) {
    text += tok.token_to_piece(id);
    return true;
  });
  return text;
}

struct Done {
  std::string text, reason;
  Usage usage;
};

Done wait(RequestState& st) {
  Done d;
  for (int i = 0; i < 600; ++i) {
    GenerationOutput o = st.take(std::chrono::milliseconds(100));
    d.text += o.text;
    if (o.finished) {
      d.reason = o.finish_reason;
      d.usage = o.usage;
      return d;
    }
  }
  ADD_FAILURE() << "request did not finish";
  return d;
}

class SchedulerTest : public ::testing::TestWithParam<std::string> {};

TEST_P(SchedulerTest, ConcurrentGreedyEqualsAloneAndPreemptionFinishesAll) {
  Transformer t = tiny(GetParam());
  const Tokenizer tok = tiny_tokenizer();
  // The prefix cache shares whole pages only: its runs' windows are one page each.
  Transformer whole_pages = tiny(GetParam(), 16, 16);
  std::vector<std::string> want, want_whole_pages;
  for (int i = 0; i < 8; ++i) want.push_back(alone(t, tok, input(i, 20)));
  for (int i = 0; i < 8; ++i) want_whole_pages.push_back(alone(whole_pages, tok, input(i, 20)));
  // Ample pages; then pages for about three sequences at a time, with the output reserved
  // at admission (the rest queue) and without (preemption).
  struct Run {
    int64_t fp_pages;
    double reserve;
    bool prefix_cache = false;
    int64_t swap_bytes = 0;
  };
  for (const Run run : {Run{400, 1.0}, Run{14, 1.0}, Run{14, 0.0}, Run{14, 0.0, true}, Run{14, 0.0, false, 1 << 24},
                        Run{14, 0.0, true, 1 << 24}}) {
    SCOPED_TRACE(::testing::Message() << run.fp_pages << " pages, reserve " << run.reserve << ", prefix cache "
                                      << run.prefix_cache << ", swap " << run.swap_bytes);
    const int64_t fp_pages = run.fp_pages;
    const bool preempts = run.reserve == 0.0 && fp_pages == 14;
    Metrics metrics;
    Transformer& model = run.prefix_cache ? whole_pages : t;
    engine::CpuRunner r(model, model.make_cache(KvPages{fp_pages, fp_pages * 4}));
    if (run.prefix_cache) r.enable_prefix_cache("test");
    r.set_swap_space(run.swap_bytes);
    SchedulerConfig config{8, 32, 256};
    config.output_reserve = run.reserve;
    Scheduler sched(r, tok, config, metrics);
    sched.start();
    std::vector<std::shared_ptr<RequestState>> reqs;
    for (int i = 0; i < 8; ++i) {
      reqs.push_back(std::make_shared<RequestState>(input(i, 20)));
      ASSERT_TRUE(sched.submit(reqs.back()));
    }
    int64_t generated = 0;
    for (int i = 0; i < 8; ++i) {
      const Done d = wait(*reqs[size_t(i)]);
      EXPECT_EQ(d.reason, "length") << i;
      EXPECT_EQ(d.usage.completion_tokens, 20);
      EXPECT_EQ(d.usage.prompt_tokens, int64_t(input(i, 20).prompt.size()));
      generated += d.usage.completion_tokens;
      // Recomputing a preempted sequence runs its generated tokens through prefill,
      // which may round differently from decode: exact without preemption, or swapped.
      if (!preempts || run.swap_bytes > 0) {
        EXPECT_EQ(d.text, (run.prefix_cache ? want_whole_pages : want)[size_t(i)]) << "request " << i;
      }
    }
    for (int i = 0; i < 50 && !sched.idle(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    sched.stop();
    const std::string m = metrics.render();
    EXPECT_NE(m.find(fmt::format("oscar_generation_tokens_total {}", generated)), std::string::npos) << m;
    const KvSegmentUsage u = r.usage();
    EXPECT_EQ(u.sink_pages + u.recent_pages + u.history_pages, 0);
    if (preempts) {
      EXPECT_EQ(m.find("oscar_preemptions_total 0\n"), std::string::npos) << "expected preemptions:\n" << m;
      // Every preempted sequence resumed, each token of it kept or recomputed; without the
      // prefix cache none is kept. (With it, how much is kept depends on what the others
      // took meanwhile: EvictsAPrefixFromItsEnd tests that what is left attaches.)
      const auto counter = [&](const std::string& name) {
        const size_t at = m.find("\n" + name + " ");
        EXPECT_NE(at, std::string::npos) << name << " missing:\n" << m;
        return at == std::string::npos ? int64_t(-1) : std::stoll(m.substr(at + name.size() + 2));
      };
      const int64_t held = counter("oscar_preempted_tokens_total");
      const int64_t kept = counter("oscar_resumed_tokens_total{source=\"kept\"}");
      const int64_t swapped = counter("oscar_resumed_tokens_total{source=\"swapped\"}");
      EXPECT_GT(held, 0);
      EXPECT_EQ(swapped + kept + counter("oscar_resumed_tokens_total{source=\"recomputed\"}"), held) << m;
      EXPECT_EQ(swapped, run.swap_bytes > 0 ? held : 0) << m;
      if (!run.prefix_cache || run.swap_bytes > 0) {
        EXPECT_EQ(kept, 0) << m;
      }
      EXPECT_EQ(r.swap_stats().used_bytes, 0);
    } else {
      EXPECT_NE(m.find("oscar_preemptions_total 0\n"), std::string::npos) << m;
      // All at once with ample pages; a few at a time, the others queued, with 14.
      EXPECT_EQ(m.find("oscar_requests_running_max 8\n") != std::string::npos, fp_pages == 400) << m;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Kv, SchedulerTest, ::testing::Values("bf16", "int2"));

TEST(Scheduler, CancelFreesPagesAndContextEndsWithLength) {
  Transformer t = tiny("int2");
  const Tokenizer tok = tiny_tokenizer();
  Metrics metrics;
  engine::CpuRunner r(t, t.make_cache(KvPages{200, 800}));
  Scheduler sched(r, tok, SchedulerConfig{4, 64, 64}, metrics);
  sched.start();
  auto long_one = std::make_shared<RequestState>(input(1, 1000));  // capped by the context of 64
  auto cancelled = std::make_shared<RequestState>(input(2, 1000));
  ASSERT_TRUE(sched.submit(long_one));
  ASSERT_TRUE(sched.submit(cancelled));
  cancelled->take(std::chrono::milliseconds(2000));  // some output first
  cancelled->cancel();
  const Done c = wait(*cancelled);
  EXPECT_EQ(c.reason, "cancelled");
  const Done d = wait(*long_one);
  EXPECT_EQ(d.reason, "length");
  EXPECT_EQ(d.usage.prompt_tokens + d.usage.completion_tokens, 64);
  auto too_long = std::make_shared<RequestState>(input(9, 4));  // 68 tokens ≥ the context
  ASSERT_TRUE(sched.submit(too_long));
  EXPECT_EQ(wait(*too_long).reason, "error");
  sched.close_admission();
  EXPECT_FALSE(sched.submit(std::make_shared<RequestState>(input(0, 1))));
  sched.stop();
  const KvSegmentUsage u = r.usage();
  EXPECT_EQ(u.sink_pages + u.recent_pages + u.history_pages, 0);
}

}  // namespace
}  // namespace oscar::serve
