// Probe (a development tool, not part of the product): the model's linear() GEMM shapes at
// 128-2048 rows, cuBLAS's default (cublasGemmEx, the call linear() makes) against every
// algorithm cuBLASLt's heuristic offers (64 MiB workspace), device time by CUDA events with L2
// flushed, median of 30. Build and run on a GPU machine:
//   nvcc -O2 -std=c++17 -gencode arch=compute_90a,code=sm_90a bench/probes/gemm_probe.cu \
//        -o gemm_probe -lcublasLt -lcublas && ./gemm_probe
// Result of 2026-12-01: bench/results/gemm-probe-2026-12-01.txt.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cstdio>
#include <vector>
#include <algorithm>
#include <cstdint>
#define CK(x) do { auto e = (x); if ((int)e != 0) { printf("err %d at %s:%d\n", (int)e, __FILE__, __LINE__); return 1; } } while (0)
__global__ void fill(__nv_bfloat16* p, size_t n) { for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) { unsigned h = i * 2654435761u; h ^= h >> 13; p[i] = __float2bfloat16(((h & 0xffff) / 32768.f - 1.f) * 0.05f); } }
int main() {
  struct S { const char* name; int rows, n, k; };
  std::vector<S> shapes;
  int Ms[] = {128, 512, 1024, 2048};
  struct P { const char* m; int h, i, hq, hkv, v; } ps[] = {{"13b", 5120, 13824, 40, 40, 32016}, {"7b", 4096, 11008, 32, 32, 32016}, {"34b", 8192, 22016, 64, 8, 32000}, {"8b", 4096, 14336, 32, 8, 128256}};
  for (auto& p : ps) for (int M : Ms) {
    int d = 128;
    shapes.push_back({p.m, M, (p.hq + 2 * p.hkv) * d, p.h});
    shapes.push_back({p.m, M, p.h, p.hq * d});
    shapes.push_back({p.m, M, 2 * p.i, p.h});
    shapes.push_back({p.m, M, p.h, p.i});
    shapes.push_back({p.m, M, p.v, p.h});
  }
  size_t maxw = 0, maxx = 0, maxo = 0;
  for (auto& s : shapes) { maxw = std::max(maxw, (size_t)s.n * s.k); maxx = std::max(maxx, (size_t)s.rows * s.k); maxo = std::max(maxo, (size_t)s.rows * s.n); }
  __nv_bfloat16 *w, *x, *o; void* ws; char* flush;
  CK(cudaMalloc(&w, maxw * 2)); CK(cudaMalloc(&x, maxx * 2)); CK(cudaMalloc(&o, maxo * 4)); CK(cudaMalloc(&ws, 64 << 20)); CK(cudaMalloc(&flush, 256 << 20));
  fill<<<1024, 256>>>(w, maxw); fill<<<1024, 256>>>(x, maxx);
  cublasHandle_t h; CK(cublasCreate(&h));
  cublasLtHandle_t lt; CK(cublasLtCreate(&lt));
  cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
  auto time = [&](auto&& f) {
    std::vector<float> ms;
    for (int i = 0; i < 3; ++i) f();
    for (int i = 0; i < 30; ++i) { cudaMemsetAsync(flush, i, 256 << 20); cudaEventRecord(a); f(); cudaEventRecord(b); cudaEventSynchronize(b); float t; cudaEventElapsedTime(&t, a, b); ms.push_back(t); }
    std::sort(ms.begin(), ms.end()); return ms[ms.size() / 2];
  };
  const float alpha = 1, beta = 0;
  printf("model rows n k | gemmex_ms tflops | best_lt_ms tflops (algo idx of N) | lt0_ms\n");
  for (auto& s : shapes) {
    double fl = 2.0 * s.rows * s.n * (double)s.k;
    float t0 = time([&] { cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, s.n, s.rows, s.k, &alpha, w, CUDA_R_16BF, s.k, x, CUDA_R_16BF, s.k, &beta, o, CUDA_R_16BF, s.n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT); });
    cublasLtMatmulDesc_t desc; CK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t tA = CUBLAS_OP_T, tB = CUBLAS_OP_N;
    CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &tA, sizeof tA));
    CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tB, sizeof tB));
    cublasLtMatrixLayout_t la, lb, lc;
    CK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, s.k, s.n, s.k));
    CK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, s.k, s.rows, s.k));
    CK(cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, s.n, s.rows, s.n));
    cublasLtMatmulPreference_t pref; CK(cublasLtMatmulPreferenceCreate(&pref));
    size_t wsb = 64 << 20; CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb));
    cublasLtMatmulHeuristicResult_t res[32]; int got = 0;
    CK(cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, lc, lc, pref, 32, res, &got));
    float best = 1e9, first = 0; int bi = -1;
    for (int i = 0; i < got; ++i) {
      float t = time([&] { cublasLtMatmul(lt, desc, &alpha, w, la, x, lb, &beta, o, lc, o, lc, &res[i].algo, ws, 64 << 20, 0); });
      if (cudaGetLastError() != cudaSuccess) continue;
      if (i == 0) first = t;
      if (t < best) best = t, bi = i;
    }
    printf("%-4s %5d %6d %6d | %.4f %6.0f | %.4f %6.0f (%d of %d) | %.4f\n", s.name, s.rows, s.n, s.k, t0, fl / t0 / 1e9, best, fl / best / 1e9, bi, got, first);
    fflush(stdout);
    cublasLtMatmulPreferenceDestroy(pref); cublasLtMatrixLayoutDestroy(la); cublasLtMatrixLayoutDestroy(lb); cublasLtMatrixLayoutDestroy(lc); cublasLtMatmulDescDestroy(desc);
  }
  return 0;
}
