#include "device_choice.h"

#include "cli_parse.h"
#ifdef HYDRAGEN_WITH_CUDA
#include "backend/cuda/cuda_attention.h"
#endif

namespace hydragen::cli {

namespace {

int cuda_devices() {
#ifdef HYDRAGEN_WITH_CUDA
  return cuda::device_count();
#else
  return 0;
#endif
}

}  // namespace

std::string pick_device(const std::string& flag_value) {
  if (flag_value == "cpu") return "cpu";
  if (flag_value == "auto") return cuda_devices() > 0 ? "cuda" : "cpu";
  if (flag_value != "cuda") usage_error("--device: expected auto, cpu or cuda, got '", flag_value, "'");
#ifndef HYDRAGEN_WITH_CUDA
  fail("--device cuda: this build has no CUDA backend (configure with -DHYDRAGEN_CUDA=ON), use --device cpu");
#endif
  HG_CHECK(cuda_devices() > 0, "--device cuda: no CUDA device (the CUDA runtime found none), use --device cpu");
  return "cuda";
}

}  // namespace hydragen::cli
