// CUDA error checks that throw hydragen::Error with what failed.
#pragma once

#include <cuda_runtime.h>

#include "hydragen/error.h"

#define HG_CUDA_CHECK(call)                                                                        \
  do {                                                                                             \
    const cudaError_t hg_status_ = (call);                                                         \
    HG_CHECK(hg_status_ == cudaSuccess, #call, " failed: ", cudaGetErrorString(hg_status_)); \
  } while (0)
