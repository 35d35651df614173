// Tuned GEMMs through cuBLASLt. See gemm_tuning.h.
#include "backend/cuda/gemm_tuning.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <string>

#include <cublasLt.h>
#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"
#include "hydragen/error.h"

namespace hydragen::cuda {
namespace {

constexpr int kCandidates = 8;       // heuristic results timed per shape
constexpr int kTimedRuns = 5;        // per candidate, after one untimed run
constexpr std::size_t kWorkspaceBytes = std::size_t{32} << 20;

void check_lt(cublasStatus_t status, const char* what) {
  HG_CHECK(status == CUBLAS_STATUS_SUCCESS, "tuned_gemm: ", what, " failed with cuBLAS status ",
           static_cast<int>(status));
}

// The descriptors of one shape and its chosen algorithm.
struct Shape {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t w = nullptr, x = nullptr, out = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool tuned = false;
  bool untunable = false;  // the heuristic offered no algorithm that ran: cuBLAS's default GEMM
};

// One per thread, like the cuBLAS handle of model_ops.cu; the workspace lives as long as the
// thread, so CUDA graphs that captured GEMMs keep a valid workspace.
struct Context {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  std::map<std::array<std::int64_t, 4>, Shape> shapes;  // (rows, n, in, out_f32)
};

Context& context() {
  thread_local Context ctx = [] {
    Context c;
    check_lt(cublasLtCreate(&c.handle), "cublasLtCreate");
    HG_CUDA_CHECK(cudaMalloc(&c.workspace, kWorkspaceBytes));
    return c;
  }();
  return ctx;
}

// Row-major out [rows, n] = x [rows, in] . w [n, in]^T is column-major out^T [n, rows] =
// w^T [n, in] x x^T [in, rows], with w a column-major [in, n] matrix (transposed) and x a
// column-major [in, rows] one: the same call as model_ops.cu's cublasGemmEx.
Shape make_shape(std::int64_t rows, std::int64_t n, std::int64_t in, bool out_f32) {
  Shape s;
  check_lt(cublasLtMatmulDescCreate(&s.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
  const cublasOperation_t transpose = CUBLAS_OP_T, keep = CUBLAS_OP_N;
  check_lt(cublasLtMatmulDescSetAttribute(s.op, CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof(transpose)),
           "setting TRANSA");
  check_lt(cublasLtMatmulDescSetAttribute(s.op, CUBLASLT_MATMUL_DESC_TRANSB, &keep, sizeof(keep)), "setting TRANSB");
  const auto u = [](std::int64_t v) { return static_cast<std::uint64_t>(v); };
  check_lt(cublasLtMatrixLayoutCreate(&s.w, CUDA_R_16BF, u(in), u(n), in), "the w layout");
  check_lt(cublasLtMatrixLayoutCreate(&s.x, CUDA_R_16BF, u(in), u(rows), in), "the x layout");
  check_lt(cublasLtMatrixLayoutCreate(&s.out, out_f32 ? CUDA_R_32F : CUDA_R_16BF, u(n), u(rows), n), "the out layout");
  return s;
}

cublasStatus_t matmul(Context& ctx, const Shape& s, const cublasLtMatmulAlgo_t& algo, const void* x, const void* w,
                      void* out, cudaStream_t stream) {
  const float alpha = 1.0f, beta = 0.0f;
  return cublasLtMatmul(ctx.handle, s.op, &alpha, w, s.w, x, s.x, &beta, out, s.out, out, s.out, &algo,
                        ctx.workspace, kWorkspaceBytes, stream);
}

// Times cuBLASLt's first kCandidates heuristic choices on the real operands; keeps the fastest
// (the heuristic's first on a tie). False when the heuristic offers nothing.
bool tune(Context& ctx, Shape& s, const void* x, const void* w, void* out, cudaStream_t stream) {
  cublasLtMatmulPreference_t preference = nullptr;
  check_lt(cublasLtMatmulPreferenceCreate(&preference), "cublasLtMatmulPreferenceCreate");
  const std::size_t workspace = kWorkspaceBytes;
  check_lt(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                                sizeof(workspace)),
           "setting the workspace size");
  cublasLtMatmulHeuristicResult_t results[kCandidates] = {};
  int found = 0;
  const cublasStatus_t asked = cublasLtMatmulAlgoGetHeuristic(ctx.handle, s.op, s.w, s.x, s.out, s.out, preference,
                                                              kCandidates, results, &found);
  cublasLtMatmulPreferenceDestroy(preference);
  if (asked != CUBLAS_STATUS_SUCCESS || found == 0) return false;

  cudaEvent_t start = nullptr, stop = nullptr;
  HG_CUDA_CHECK(cudaEventCreate(&start));
  HG_CUDA_CHECK(cudaEventCreate(&stop));
  float best = std::numeric_limits<float>::infinity();
  for (int i = 0; i < found; ++i) {
    if (results[i].state != CUBLAS_STATUS_SUCCESS) continue;
    if (matmul(ctx, s, results[i].algo, x, w, out, stream) != CUBLAS_STATUS_SUCCESS) continue;
    HG_CUDA_CHECK(cudaEventRecord(start, stream));
    for (int r = 0; r < kTimedRuns; ++r) check_lt(matmul(ctx, s, results[i].algo, x, w, out, stream), "cublasLtMatmul");
    HG_CUDA_CHECK(cudaEventRecord(stop, stream));
    HG_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    HG_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    if (ms < best) best = ms, s.algo = results[i].algo, s.tuned = true;
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return s.tuned;
}

}  // namespace

bool gemm_tuning_enabled() {
  static const bool enabled = [] {
    const char* env = std::getenv("HYDRAGEN_GEMM_TUNE");
    return env != nullptr && std::string(env) != "0";
  }();
  return enabled;
}

bool tuned_gemm(const void* x, const void* w, void* out, bool out_f32, std::int64_t rows, std::int64_t n,
                std::int64_t in, void* stream) {
  Context& ctx = context();
  const auto st = static_cast<cudaStream_t>(stream);
  auto [it, inserted] = ctx.shapes.try_emplace({rows, n, in, out_f32 ? 1 : 0});
  Shape& s = it->second;
  if (inserted) s = make_shape(rows, n, in, out_f32);
  if (s.untunable) return false;
  if (!s.tuned) {
    cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
    HG_CUDA_CHECK(cudaStreamIsCapturing(st, &capturing));
    if (capturing != cudaStreamCaptureStatusNone) return false;
    if (!tune(ctx, s, x, w, out, st)) {
      s.untunable = true;
      return false;
    }
  }
  check_lt(matmul(ctx, s, s.algo, x, w, out, st), "cublasLtMatmul");
  return true;
}

}  // namespace hydragen::cuda
