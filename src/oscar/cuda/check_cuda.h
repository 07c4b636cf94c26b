// For the CUDA test and benchmark programs (not the library, which throws): print the
// failed call with its file, line and CUDA's message, and exit with status 1.
#pragma once
#include <cstdio>
#include <cstdlib>

#include <cuda_runtime.h>

#define CHECK_CUDA(call)                                                                                     \
  do {                                                                                                       \
    const cudaError_t e_ = (call);                                                                           \
    if (e_ != cudaSuccess) {                                                                                 \
      std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_));    \
      std::exit(1);                                                                                          \
    }                                                                                                        \
  } while (0)
