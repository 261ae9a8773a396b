#pragma once

// Checks a CUDA runtime call. Only the runtime API is used here (no c10::cuda symbols), so the
// same sources build against DTK's CUDA compatibility headers for the hipified DCU torch.

#include <c10/util/Exception.h>

#include <cuda_runtime_api.h>

#define FLAGOS_CUDA_CHECK(expr)                    \
  do {                                             \
    const cudaError_t flagos_cuda_status = (expr); \
    TORCH_CHECK(                                   \
        flagos_cuda_status == cudaSuccess,         \
        #expr " failed: ",                         \
        cudaGetErrorString(flagos_cuda_status));   \
  } while (0)
