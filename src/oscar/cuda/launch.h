// Kernel launches as programmatic dependents (sm_90): the kernel may be scheduled while the
// grid before it in the stream drains (once that grid's CTAs have all called
// allow_dependent_launch), so that its launch overlaps that grid's tail. The kernel
// must call wait_for_prior_grid() before it reads anything an earlier kernel wrote, and
// before it writes anything at all. Inside a CUDA graph capture it becomes a programmatic
// edge. Internal to src/oscar/cuda (included by .cu files only).
#pragma once
#include <cuda_runtime.h>

#include <string>
#include <utility>

#include "oscar/cuda/host_checks.h"

namespace oscar::cuda::detail {

template <class... Params, class... Args>
void launch_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                      const char* what, Args&&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &attribute;
  config.numAttrs = 1;
  check_cuda(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...), std::string(what) + " launch");
}

}  // namespace oscar::cuda::detail
