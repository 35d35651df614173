// What every CUDA test file needs: SKIP_WITHOUT_GPU(), which skips the test with a message
// when the build has no CUDA backend or the machine has no device (CI has neither).
#pragma once

#include <gtest/gtest.h>

#ifdef HYDRAGEN_WITH_CUDA
#include "backend/cuda/cuda_attention.h"
#define SKIP_WITHOUT_GPU() \
  if (::hydragen::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device: CUDA tests skipped"
#else
#define SKIP_WITHOUT_GPU() GTEST_SKIP() << "built without CUDA (HYDRAGEN_WITH_CUDA unset): CUDA tests skipped"
#endif
