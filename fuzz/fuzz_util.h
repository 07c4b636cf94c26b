// Shared by the libFuzzer targets (fuzz/*.cpp): the rule every target follows is that
// oscar::Error (a clean refusal naming what is wrong) is the only acceptable failure; any
// other exception escapes, and libFuzzer reports it as a crash, as it does an abort() or a
// failed FUZZ_EXPECT.
#pragma once
#include <cstdio>
#include <cstdlib>

#define FUZZ_EXPECT(cond)                                                                  \
  do {                                                                                     \
    if (!(cond)) {                                                                         \
      std::fprintf(stderr, "%s:%d: expectation failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                        \
    }                                                                                      \
  } while (0)
