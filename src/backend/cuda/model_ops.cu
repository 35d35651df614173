#include "backend/cuda/model_ops.h"

#include <algorithm>
#include <cstdint>
#include <initializer_list>

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"
#include "hydragen/error.h"
#include "core/counter_rng.h"

namespace hydragen::cuda {

namespace {

using bf16_t = __nv_bfloat16;

cudaStream_t as_stream(void* stream) { return static_cast<cudaStream_t>(stream); }

void check_operand(const char* function, const char* name, const Tensor& t, DType dtype, int rank) {
  HG_CHECK(t.defined() && t.device() == Device::cuda && t.dtype() == dtype && t.rank() == rank && t.is_contiguous(),
           function, ": ", name, " must be a contiguous CUDA ", dtype_name(dtype), " tensor of rank ", rank, ", got ",
           t.defined() ? t.shape_str() + " " + dtype_name(t.dtype()) + " on " + device_name(t.device())
                       : std::string("nothing"));
}

const bf16_t* cdata(const Tensor& t) { return static_cast<const bf16_t*>(t.raw()); }
bf16_t* mdata(Tensor& t) { return static_cast<bf16_t*>(t.raw()); }

int blocks_for(std::int64_t n, int threads) { return static_cast<int>((n + threads - 1) / threads); }

// Whether every pointer (nullptr counts as aligned) is 16-byte aligned: the kernels with
// 16-byte accesses need it.
bool aligned16(std::initializer_list<const void*> pointers) {
  for (const void* p : pointers)
    if (reinterpret_cast<std::uintptr_t>(p) % 16 != 0) return false;
  return true;
}

// Sum over the block; every thread gets the result. blockDim.x is a multiple of 32, <= 1024.
__device__ float block_sum(float value) {
  __shared__ float warp_sums[32];
  for (int offset = 16; offset > 0; offset /= 2) value += __shfl_xor_sync(0xffffffffu, value, offset);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) warp_sums[warp] = value;
  __syncthreads();
  const int warps = blockDim.x / 32;
  value = lane < warps ? warp_sums[lane] : 0.0f;
  for (int offset = 16; offset > 0; offset /= 2) value += __shfl_xor_sync(0xffffffffu, value, offset);
  __syncthreads();  // warp_sums may be reused by the next call
  return value;
}

// One block per row. The residual is updated in bf16 first (as a bf16 model does), and the
// norm is taken of the stored values: out = x * rsqrt(mean(x^2) + eps) * weight.
__global__ void add_rms_norm_kernel(bf16_t* residual, const bf16_t* delta, const bf16_t* weight, bf16_t* out,
                                    int hidden, float eps) {
  bf16_t* x = residual + static_cast<std::int64_t>(blockIdx.x) * hidden;
  const bf16_t* d = delta == nullptr ? nullptr : delta + static_cast<std::int64_t>(blockIdx.x) * hidden;
  float sum_squares = 0.0f;
  for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
    float v = __bfloat162float(x[i]);
    if (d != nullptr) {
      x[i] = __float2bfloat16(v + __bfloat162float(d[i]));
      v = __bfloat162float(x[i]);
    }
    sum_squares += v * v;
  }
  const float inv_rms = rsqrtf(block_sum(sum_squares) / hidden + eps);
  bf16_t* o = out + static_cast<std::int64_t>(blockIdx.x) * hidden;
  for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
    o[i] = __float2bfloat16(__bfloat162float(x[i]) * inv_rms * __bfloat162float(weight[i]));
  }
}

// The same with 16-byte accesses (e11): 128 threads per row, each keeping its <= V chunks of 8
// values in registers between the two passes (the kernel above reads x twice with 2-byte
// loads: ~45% of the copy rate at 1024 x 5120). For hidden % 8 == 0, hidden <= 1024 V, and
// 16-byte aligned rows. The same arithmetic per element; the sum of squares adds in another
// order.
constexpr int kNormThreads = 128;
template <int V>
__global__ void __launch_bounds__(kNormThreads) add_rms_norm_vec8_kernel(bf16_t* residual, const bf16_t* delta,
                                                                         const bf16_t* weight, bf16_t* out, int hidden,
                                                                         float eps) {
  const int chunks = hidden / 8;
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * hidden;
  uint4* x = reinterpret_cast<uint4*>(residual + row);
  const uint4* d = delta == nullptr ? nullptr : reinterpret_cast<const uint4*>(delta + row);
  uint4 kept[V];
  float sum_squares = 0.0f;
#pragma unroll
  for (int j = 0; j < V; ++j) {
    const int c = threadIdx.x + j * kNormThreads;
    if (c >= chunks) break;
    uint4 a = x[c];
    bf16_t* av = reinterpret_cast<bf16_t*>(&a);
    if (d != nullptr) {
      const uint4 b = d[c];
      const bf16_t* bv = reinterpret_cast<const bf16_t*>(&b);
#pragma unroll
      for (int k = 0; k < 8; ++k) av[k] = __float2bfloat16(__bfloat162float(av[k]) + __bfloat162float(bv[k]));
      x[c] = a;
    }
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const float v = __bfloat162float(av[k]);
      sum_squares += v * v;
    }
    kept[j] = a;
  }
  const float inv_rms = rsqrtf(block_sum(sum_squares) / hidden + eps);
  uint4* o = reinterpret_cast<uint4*>(out + row);
  const uint4* w = reinterpret_cast<const uint4*>(weight);
#pragma unroll
  for (int j = 0; j < V; ++j) {
    const int c = threadIdx.x + j * kNormThreads;
    if (c >= chunks) break;
    const uint4 wc = w[c];
    const bf16_t* wv = reinterpret_cast<const bf16_t*>(&wc);
    const bf16_t* av = reinterpret_cast<const bf16_t*>(&kept[j]);
    uint4 r;
    bf16_t* rv = reinterpret_cast<bf16_t*>(&r);
#pragma unroll
    for (int k = 0; k < 8; ++k) rv[k] = __float2bfloat16(__bfloat162float(av[k]) * inv_rms * __bfloat162float(wv[k]));
    o[c] = r;
  }
}

// One warp per (row, head) of the q and k heads of qkv rows, normalised in place over head_dim:
// x * rsqrt(mean(x^2) + eps) * weight, weight the q or the k one. Grid-stride over the heads.
constexpr int kHeadNormWarps = 4;
__global__ void __launch_bounds__(32 * kHeadNormWarps) qk_rms_norm_kernel(bf16_t* qkv, std::int64_t rows, int q_heads,
                                                                          int kv_heads, int head_dim,
                                                                          const bf16_t* q_weight, const bf16_t* k_weight,
                                                                          float eps) {
  const int lane = threadIdx.x % 32, normed = q_heads + kv_heads, row_heads = q_heads + 2 * kv_heads;
  const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * kHeadNormWarps;
  for (std::int64_t item = static_cast<std::int64_t>(blockIdx.x) * kHeadNormWarps + threadIdx.x / 32;
       item < rows * normed; item += warps) {
    const std::int64_t row = item / normed;
    const int head = static_cast<int>(item % normed);
    bf16_t* x = qkv + (row * row_heads + head) * head_dim;
    const bf16_t* w = head < q_heads ? q_weight : k_weight;
    float sum_squares = 0.0f;
    for (int i = lane; i < head_dim; i += 32) sum_squares += __bfloat162float(x[i]) * __bfloat162float(x[i]);
    for (int offset = 16; offset > 0; offset /= 2) sum_squares += __shfl_xor_sync(0xffffffffu, sum_squares, offset);
    const float inv_rms = rsqrtf(sum_squares / head_dim + eps);
    for (int i = lane; i < head_dim; i += 32) {
      x[i] = __float2bfloat16(__bfloat162float(x[i]) * inv_rms * __bfloat162float(w[i]));
    }
  }
}

// The attention's TMA shared kernel may run as RoPE's programmatic dependent (v28,
// PagedAttentionArgs::q_from_previous_launch): both RoPE kernels let it start at once; it
// reads nothing they write before its griddepcontrol.wait. A no-op before a plain launch.
__device__ __forceinline__ void let_attention_start() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// One block per row. Pairs are (x[i], x[i + d/2]):
// x'[i] = x[i] cos - x[i + d/2] sin, x'[i + d/2] = x[i + d/2] cos + x[i] sin.
// blockDim is a multiple of pairs_per_pass = min(d/2, blockDim): each thread keeps a pair
// index and takes its sincos once for every head of the row (80 q and k heads at 13B).
__global__ void rope_append_kv_kernel(bf16_t* qkv, int q_heads, int kv_heads, int head_dim, const int* positions,
                                      const float* inv_freq, const int* slots, bf16_t* k_cache, bf16_t* v_cache,
                                      bf16_t* q_out) {
  let_attention_start();
  const int row = blockIdx.x, half = head_dim / 2;
  const int pairs_per_pass = min(half, static_cast<int>(blockDim.x)), head_step = blockDim.x / pairs_per_pass;
  const int heads = q_heads + 2 * kv_heads;
  bf16_t* r = qkv + static_cast<std::int64_t>(row) * heads * head_dim;
  const std::int64_t slot_base = static_cast<std::int64_t>(slots[row]) * kv_heads * head_dim;
  const float position = static_cast<float>(positions[row]);
  for (int i = threadIdx.x % pairs_per_pass; i < half; i += pairs_per_pass) {
    float s, c;
    sincosf(position * inv_freq[i], &s, &c);
    for (int head = threadIdx.x / pairs_per_pass; head < heads; head += head_step) {
      bf16_t* h = r + head * head_dim;
      if (head >= q_heads + kv_heads) {  // v: copied as is
        const std::int64_t at = slot_base + static_cast<std::int64_t>(head - q_heads - kv_heads) * head_dim;
        v_cache[at + i] = h[i];
        v_cache[at + i + half] = h[i + half];
        continue;
      }
      const float a = __bfloat162float(h[i]), b = __bfloat162float(h[i + half]);
      const bf16_t x = __float2bfloat16(a * c - b * s), y = __float2bfloat16(b * c + a * s);
      // q heads go to q_out where given, else in place; with q_out the qkv row is left as it
      // was (k goes to the cache alone)
      if (q_out == nullptr || head < q_heads) {
        bf16_t* to = q_out != nullptr ? q_out + (static_cast<std::int64_t>(row) * q_heads + head) * head_dim : h;
        to[i] = x;
        to[i + half] = y;
      }
      if (head >= q_heads) {  // k: appended to the cache
        const std::int64_t at = slot_base + static_cast<std::int64_t>(head - q_heads) * head_dim;
        k_cache[at + i] = x;
        k_cache[at + i + half] = y;
      }
    }
  }
}

// The same with 16-byte accesses (e11): the row's cos and sin in shared memory (computed
// once, as above), then each unit is 8 pairs of one q or k head (two 16-byte loads, two
// stores, two more into the k cache) or 8 values of one v head (copied). The same values as
// above, bit for bit. For head_dim % 16 == 0 and 16-byte aligned tensors.
__global__ void rope_append_kv_vec8_kernel(bf16_t* qkv, int q_heads, int kv_heads, int head_dim, const int* positions,
                                           const float* inv_freq, const int* slots, bf16_t* k_cache, bf16_t* v_cache,
                                           bf16_t* q_out) {
  extern __shared__ float table[];  // cos [half], sin [half]
  let_attention_start();
  const int row = blockIdx.x, half = head_dim / 2;
  float* cos_t = table;
  float* sin_t = table + half;
  const float position = static_cast<float>(positions[row]);
  for (int i = threadIdx.x; i < half; i += blockDim.x) sincosf(position * inv_freq[i], &sin_t[i], &cos_t[i]);
  __syncthreads();
  const int heads = q_heads + 2 * kv_heads;
  bf16_t* r = qkv + static_cast<std::int64_t>(row) * heads * head_dim;
  const std::int64_t slot_base = static_cast<std::int64_t>(slots[row]) * kv_heads * head_dim;
  const int pair_units = half / 8, copy_units = head_dim / 8;
  const int rotated = (q_heads + kv_heads) * pair_units;
  for (int u = threadIdx.x; u < rotated + kv_heads * copy_units; u += blockDim.x) {
    if (u >= rotated) {  // v: copied as is
      const int head = (u - rotated) / copy_units, c = (u - rotated) % copy_units * 8;
      *reinterpret_cast<uint4*>(v_cache + slot_base + static_cast<std::int64_t>(head) * head_dim + c) =
          *reinterpret_cast<const uint4*>(r + static_cast<std::int64_t>(q_heads + kv_heads + head) * head_dim + c);
      continue;
    }
    const int head = u / pair_units, c = u % pair_units * 8;
    bf16_t* h = r + static_cast<std::int64_t>(head) * head_dim;
    const uint4 a8 = *reinterpret_cast<const uint4*>(h + c), b8 = *reinterpret_cast<const uint4*>(h + c + half);
    const bf16_t* a = reinterpret_cast<const bf16_t*>(&a8);
    const bf16_t* b = reinterpret_cast<const bf16_t*>(&b8);
    uint4 x8, y8;
    bf16_t* x = reinterpret_cast<bf16_t*>(&x8);
    bf16_t* y = reinterpret_cast<bf16_t*>(&y8);
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const float av = __bfloat162float(a[k]), bv = __bfloat162float(b[k]), cs = cos_t[c + k], sn = sin_t[c + k];
      x[k] = __float2bfloat16(av * cs - bv * sn);
      y[k] = __float2bfloat16(bv * cs + av * sn);
    }
    // q heads go to q_out where given, else in place; with q_out the qkv row is left as it was
    // (k goes to the cache alone: nothing reads qkv's k after this kernel)
    if (q_out == nullptr || head < q_heads) {
      bf16_t* to = q_out != nullptr ? q_out + (static_cast<std::int64_t>(row) * q_heads + head) * head_dim : h;
      *reinterpret_cast<uint4*>(to + c) = x8;
      *reinterpret_cast<uint4*>(to + c + half) = y8;
    }
    if (head >= q_heads) {  // k: the rotated values appended to the cache
      bf16_t* at = k_cache + slot_base + static_cast<std::int64_t>(head - q_heads) * head_dim;
      *reinterpret_cast<uint4*>(at + c) = x8;
      *reinterpret_cast<uint4*>(at + c + half) = y8;
    }
  }
}

__global__ void silu_mul_kernel(const bf16_t* gate_up, bf16_t* out, std::int64_t rows, std::int64_t inter) {
  const std::int64_t index = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index >= rows * inter) return;
  const std::int64_t row = index / inter, column = index % inter;
  const float g = __bfloat162float(gate_up[row * 2 * inter + column]);
  const float u = __bfloat162float(gate_up[row * 2 * inter + inter + column]);
  out[index] = __float2bfloat16(g / (1.0f + __expf(-g)) * u);
}

// The same per element, 8 columns per thread (16-byte loads and stores), a row per grid row:
// no 64-bit division per element (the kernel above spends ~2x its memory time on it at
// 1024 x 13824). For inter % 8 == 0 and 16-byte aligned rows.
__global__ void silu_mul_vec8_kernel(const bf16_t* gate_up, bf16_t* out, int inter) {
  const int column = (blockIdx.x * blockDim.x + threadIdx.x) * 8;
  if (column >= inter) return;
  const std::int64_t row = blockIdx.y;
  const bf16_t* gate = gate_up + row * 2 * inter + column;
  const uint4 g8 = *reinterpret_cast<const uint4*>(gate);
  const uint4 u8 = *reinterpret_cast<const uint4*>(gate + inter);
  const bf16_t* g = reinterpret_cast<const bf16_t*>(&g8);
  const bf16_t* u = reinterpret_cast<const bf16_t*>(&u8);
  uint4 o8;
  bf16_t* o = reinterpret_cast<bf16_t*>(&o8);
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    const float gk = __bfloat162float(g[k]);
    o[k] = __float2bfloat16(gk / (1.0f + __expf(-gk)) * __bfloat162float(u[k]));
  }
  *reinterpret_cast<uint4*>(out + row * inter + column) = o8;
}

__global__ void add_kernel(bf16_t* x, const bf16_t* y, std::int64_t n) {
  const std::int64_t index = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index < n) x[index] = __float2bfloat16(__bfloat162float(x[index]) + __bfloat162float(y[index]));
}

__global__ void fill_uniform_kernel(bf16_t* out, std::int64_t n, std::uint64_t key, float amplitude) {
  const std::int64_t index = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index < n) out[index] = __float2bfloat16(amplitude * counter_uniform(key, static_cast<std::uint64_t>(index)));
}

__global__ void add_bias_kernel(bf16_t* y, const bf16_t* bias, std::int64_t rows, std::int64_t n) {
  const std::int64_t index = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index < rows * n) y[index] = __float2bfloat16(__bfloat162float(y[index]) + __bfloat162float(bias[index % n]));
}

__global__ void embed_rows_kernel(const bf16_t* table, const int* tokens, bf16_t* out, int hidden) {
  const bf16_t* row = table + static_cast<std::int64_t>(tokens[blockIdx.x]) * hidden;
  bf16_t* o = out + static_cast<std::int64_t>(blockIdx.x) * hidden;
  for (int i = threadIdx.x; i < hidden; i += blockDim.x) o[i] = row[i];
}

// Row copies by index: thread i of the grid-stride loop copies chunk i % chunks of copy
// i / chunks, from src row src_index[c] to dst row dst_index[c] (row c without dst_index); a copy
// naming a row outside its tensor is skipped. Chunks of 16 bytes where rows allow it (whole rows
// move as coalesced 16-byte loads), else 4, else 1.
template <class Chunk>
__global__ void copy_rows_kernel(const Chunk* src, const int* src_index, std::int64_t src_rows, Chunk* dst,
                                 const int* dst_index, std::int64_t dst_rows, std::int64_t copies, std::int64_t chunks) {
  for (std::int64_t at = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; at < copies * chunks;
       at += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t copy = at / chunks, chunk = at % chunks;
    const std::int64_t s = src_index[copy], d = dst_index != nullptr ? dst_index[copy] : copy;
    if (s < 0 || s >= src_rows || d < 0 || d >= dst_rows) continue;
    dst[d * chunks + chunk] = src[s * chunks + chunk];
  }
}

// One cuBLAS handle per thread, made on first use and kept for the process.
cublasHandle_t cublas_handle() {
  thread_local cublasHandle_t handle = [] {
    cublasHandle_t h = nullptr;
    const cublasStatus_t status = cublasCreate(&h);
    HG_CHECK(status == CUBLAS_STATUS_SUCCESS, "cublasCreate failed with status ", static_cast<int>(status),
             " (", cublasGetStatusString(status), ")");
    return h;
  }();
  return handle;
}

constexpr int kThreads = 256;

template <class Chunk>
void launch_copy_rows(const void* src, const int* src_index, std::int64_t src_rows, void* dst, const int* dst_index,
                      std::int64_t dst_rows, std::int64_t copies, std::int64_t row_bytes, void* stream) {
  const std::int64_t chunks = row_bytes / static_cast<std::int64_t>(sizeof(Chunk));
  // Enough blocks to fill the device; the grid-stride loop does the rest.
  const auto grid = static_cast<unsigned>(std::min<std::int64_t>((copies * chunks + kThreads - 1) / kThreads, 4096));
  copy_rows_kernel<<<grid, kThreads, 0, as_stream(stream)>>>(static_cast<const Chunk*>(src), src_index, src_rows,
                                                             static_cast<Chunk*>(dst), dst_index, dst_rows, copies,
                                                             chunks);
  HG_CUDA_CHECK(cudaGetLastError());
}

void copy_rows(const void* src, const int* src_index, std::int64_t src_rows, void* dst, const int* dst_index,
               std::int64_t dst_rows, std::int64_t copies, std::int64_t row_bytes, void* stream) {
  auto aligned = [&](std::int64_t bytes) {
    return row_bytes % bytes == 0 && reinterpret_cast<std::uintptr_t>(src) % bytes == 0 &&
           reinterpret_cast<std::uintptr_t>(dst) % bytes == 0;
  };
  if (aligned(16))
    launch_copy_rows<uint4>(src, src_index, src_rows, dst, dst_index, dst_rows, copies, row_bytes, stream);
  else if (aligned(4))
    launch_copy_rows<std::uint32_t>(src, src_index, src_rows, dst, dst_index, dst_rows, copies, row_bytes, stream);
  else
    launch_copy_rows<unsigned char>(src, src_index, src_rows, dst, dst_index, dst_rows, copies, row_bytes, stream);
}

}  // namespace

void add_rms_norm(Tensor& residual, const Tensor& delta, const Tensor& weight, float eps, Tensor& out, void* stream) {
  check_operand("add_rms_norm", "residual", residual, DType::bf16, 2);
  check_operand("add_rms_norm", "weight", weight, DType::bf16, 1);
  check_operand("add_rms_norm", "out", out, DType::bf16, 2);
  if (delta.defined()) check_operand("add_rms_norm", "delta", delta, DType::bf16, 2);
  const std::int64_t rows = residual.size(0), hidden = residual.size(1);
  HG_CHECK(weight.size(0) == hidden && out.shape() == residual.shape() &&
               (!delta.defined() || delta.shape() == residual.shape()),
           "add_rms_norm: residual ", residual.shape_str(), ", delta and out must match it, weight must be [", hidden,
           "], got weight ", weight.shape_str(), " out ", out.shape_str());
  if (rows == 0) return;
  const bf16_t* d = delta.defined() ? cdata(delta) : nullptr;
  const bool aligned = aligned16({residual.raw(), weight.raw(), out.raw(), d});
  const auto grid = static_cast<unsigned>(rows);
  if (hidden % 8 == 0 && aligned && hidden <= 16 * 8 * kNormThreads) {
    auto launch = [&](auto kernel) {
      kernel<<<grid, kNormThreads, 0, as_stream(stream)>>>(mdata(residual), d, cdata(weight), mdata(out),
                                                           static_cast<int>(hidden), eps);
    };
    if (hidden <= 4 * 8 * kNormThreads) launch(add_rms_norm_vec8_kernel<4>);
    else if (hidden <= 8 * 8 * kNormThreads) launch(add_rms_norm_vec8_kernel<8>);
    else launch(add_rms_norm_vec8_kernel<16>);
  } else {
    add_rms_norm_kernel<<<grid, kThreads, 0, as_stream(stream)>>>(mdata(residual), d, cdata(weight), mdata(out),
                                                                  static_cast<int>(hidden), eps);
  }
  HG_CUDA_CHECK(cudaGetLastError());
}

void qk_rms_norm(Tensor& qkv, std::int64_t q_heads, std::int64_t kv_heads, const Tensor& q_weight,
                 const Tensor& k_weight, float eps, void* stream) {
  check_operand("qk_rms_norm", "qkv", qkv, DType::bf16, 2);
  check_operand("qk_rms_norm", "q_weight", q_weight, DType::bf16, 1);
  check_operand("qk_rms_norm", "k_weight", k_weight, DType::bf16, 1);
  const std::int64_t rows = qkv.size(0), head_dim = q_weight.size(0);
  HG_CHECK(q_heads > 0 && kv_heads > 0 && k_weight.size(0) == head_dim &&
               qkv.size(1) == (q_heads + 2 * kv_heads) * head_dim,
           "qk_rms_norm: qkv must be [rows, (", q_heads, " + 2 x ", kv_heads, ") x head_dim] and both weights ",
           "[head_dim]; got qkv ", qkv.shape_str(), ", q_weight ", q_weight.shape_str(), ", k_weight ",
           k_weight.shape_str());
  if (rows == 0) return;
  const std::int64_t warps = rows * (q_heads + kv_heads);
  const auto grid = static_cast<unsigned>(std::min<std::int64_t>((warps + kHeadNormWarps - 1) / kHeadNormWarps, 65536));
  qk_rms_norm_kernel<<<grid, 32 * kHeadNormWarps, 0, as_stream(stream)>>>(
      mdata(qkv), rows, static_cast<int>(q_heads), static_cast<int>(kv_heads), static_cast<int>(head_dim),
      cdata(q_weight), cdata(k_weight), eps);
  HG_CUDA_CHECK(cudaGetLastError());
}

void rope_append_kv(Tensor& qkv, std::int64_t q_heads, std::int64_t kv_heads, const Tensor& positions,
                    const Tensor& inv_freq, const Tensor& slots, Tensor& k_cache, Tensor& v_cache, Tensor* q_out,
                    void* stream) {
  check_operand("rope_append_kv", "qkv", qkv, DType::bf16, 2);
  check_operand("rope_append_kv", "positions", positions, DType::i32, 1);
  check_operand("rope_append_kv", "inv_freq", inv_freq, DType::f32, 1);
  check_operand("rope_append_kv", "slots", slots, DType::i32, 1);
  check_operand("rope_append_kv", "k_cache", k_cache, DType::bf16, 3);
  check_operand("rope_append_kv", "v_cache", v_cache, DType::bf16, 3);
  const std::int64_t rows = qkv.size(0), head_dim = k_cache.size(2);
  HG_CHECK(q_heads > 0 && kv_heads > 0 && q_heads % kv_heads == 0 && head_dim % 2 == 0 &&
               qkv.size(1) == (q_heads + 2 * kv_heads) * head_dim && k_cache.size(1) == kv_heads &&
               v_cache.shape() == k_cache.shape() && positions.size(0) == rows && slots.size(0) == rows &&
               inv_freq.size(0) == head_dim / 2,
           "rope_append_kv: qkv must be [rows, (", q_heads, " + 2 x ", kv_heads, ") x head_dim], caches [slots, ",
           kv_heads, ", head_dim], positions and slots [rows], inv_freq [head_dim / 2]; got qkv ", qkv.shape_str(),
           " k_cache ", k_cache.shape_str(), " positions ", positions.shape_str(), " slots ", slots.shape_str(),
           " inv_freq ", inv_freq.shape_str());
  if (q_out != nullptr) {
    HG_CHECK(q_out->dtype() == DType::bf16 && q_out->device() == Device::cuda && q_out->is_contiguous() &&
                 q_out->numel() == rows * q_heads * head_dim,
             "rope_append_kv: q_out must be a contiguous bf16 CUDA tensor of rows x q_heads x head_dim = ", rows, " x ",
             q_heads, " x ", head_dim, " elements; got ", dtype_name(q_out->dtype()), " ", q_out->shape_str());
  }
  const int half = static_cast<int>(head_dim / 2);
  if (rows == 0 || half == 0) return;
  if (head_dim % 16 == 0 &&
      aligned16({qkv.raw(), k_cache.raw(), v_cache.raw(), q_out != nullptr ? q_out->raw() : nullptr})) {
    rope_append_kv_vec8_kernel<<<static_cast<unsigned>(rows), kThreads, 2 * half * sizeof(float), as_stream(stream)>>>(
        mdata(qkv), static_cast<int>(q_heads), static_cast<int>(kv_heads), static_cast<int>(head_dim),
        positions.data<int>(), inv_freq.data<float>(), slots.data<int>(), mdata(k_cache), mdata(v_cache),
        q_out != nullptr ? mdata(*q_out) : nullptr);
    HG_CUDA_CHECK(cudaGetLastError());
    return;
  }
  // A whole number of passes over the pairs: kThreads rounded down to a multiple of d/2 (240
  // threads for d 80), or d/2 itself up to 1024, then 1024 with a loop over the pairs.
  const int threads = half <= kThreads ? kThreads / half * half : std::min(half, 1024);
  rope_append_kv_kernel<<<static_cast<unsigned>(rows), static_cast<unsigned>(threads), 0, as_stream(stream)>>>(
      mdata(qkv), static_cast<int>(q_heads), static_cast<int>(kv_heads), static_cast<int>(head_dim),
      positions.data<int>(), inv_freq.data<float>(), slots.data<int>(), mdata(k_cache), mdata(v_cache),
      q_out != nullptr ? mdata(*q_out) : nullptr);
  HG_CUDA_CHECK(cudaGetLastError());
}

void silu_mul(const Tensor& gate_up, Tensor& out, void* stream) {
  check_operand("silu_mul", "gate_up", gate_up, DType::bf16, 2);
  check_operand("silu_mul", "out", out, DType::bf16, 2);
  const std::int64_t rows = gate_up.size(0), inter = out.size(1);
  HG_CHECK(out.size(0) == rows && gate_up.size(1) == 2 * inter, "silu_mul: gate_up must be [rows, 2 x inter] for out ",
           out.shape_str(), ", got ", gate_up.shape_str());
  if (rows * inter == 0) return;
  if (inter % 8 == 0 && aligned16({gate_up.raw(), out.raw()}) && rows <= 65535 && inter <= (std::int64_t{1} << 30)) {
    const dim3 grid(static_cast<unsigned>(blocks_for(inter / 8, kThreads)), static_cast<unsigned>(rows));
    silu_mul_vec8_kernel<<<grid, kThreads, 0, as_stream(stream)>>>(cdata(gate_up), mdata(out), static_cast<int>(inter));
  } else {
    silu_mul_kernel<<<blocks_for(rows * inter, kThreads), kThreads, 0, as_stream(stream)>>>(cdata(gate_up), mdata(out),
                                                                                             rows, inter);
  }
  HG_CUDA_CHECK(cudaGetLastError());
}

void add_into(Tensor& x, const Tensor& y, void* stream) {
  check_operand("add_into", "x", x, DType::bf16, 2);
  check_operand("add_into", "y", y, DType::bf16, 2);
  HG_CHECK(x.shape() == y.shape(), "add_into: shapes differ: ", x.shape_str(), " vs ", y.shape_str());
  if (x.numel() == 0) return;
  add_kernel<<<blocks_for(x.numel(), kThreads), kThreads, 0, as_stream(stream)>>>(mdata(x), cdata(y), x.numel());
  HG_CUDA_CHECK(cudaGetLastError());
}

void linear(const Tensor& x, const Tensor& w, Tensor& out, void* stream) {
  check_operand("linear", "x", x, DType::bf16, 2);
  check_operand("linear", "w", w, DType::bf16, 2);
  HG_CHECK(out.defined() && (out.dtype() == DType::bf16 || out.dtype() == DType::f32),
           "linear: out must be bf16 or f32");
  check_operand("linear", "out", out, out.dtype(), 2);
  const std::int64_t rows = x.size(0), in = x.size(1), n = w.size(0);
  HG_CHECK(w.size(1) == in && out.size(0) == rows && out.size(1) == n, "linear: x ", x.shape_str(), " w ",
           w.shape_str(), " out ", out.shape_str(), ", expected x [rows, in], w [out, in], out [rows, out]");
  if (rows == 0) return;
  // Row-major out [rows, n] is column-major out^T [n, rows] = W [n, in] x^T [in, rows]; the
  // row-major W is a column-major [in, n] matrix, hence its transpose.
  const float alpha = 1.0f, beta = 0.0f;
  cublasHandle_t handle = cublas_handle();
  HG_CHECK(cublasSetStream(handle, as_stream(stream)) == CUBLAS_STATUS_SUCCESS, "cublasSetStream failed");
  const cublasStatus_t status =
      cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(rows), static_cast<int>(in),
                   &alpha, w.raw(), CUDA_R_16BF, static_cast<int>(in), x.raw(), CUDA_R_16BF, static_cast<int>(in), &beta,
                   out.raw(), out.dtype() == DType::f32 ? CUDA_R_32F : CUDA_R_16BF, static_cast<int>(n), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  HG_CHECK(status == CUBLAS_STATUS_SUCCESS, "linear: cublasGemmEx failed with status ", static_cast<int>(status));
}

void prepare_linear(void* stream) {
  // A 16x16x16 product: the handle, the stream's workspace and the library's first kernels.
  Tensor x = Tensor::zeros({16, 16}, DType::bf16, Device::cuda), out = Tensor::zeros({16, 16}, DType::bf16, Device::cuda);
  linear(x, x, out, stream);
  HG_CUDA_CHECK(cudaStreamSynchronize(as_stream(stream)));
}

void add_bias(Tensor& y, const Tensor& bias, void* stream) {
  check_operand("add_bias", "y", y, DType::bf16, 2);
  check_operand("add_bias", "bias", bias, DType::bf16, 1);
  HG_CHECK(bias.size(0) == y.size(1), "add_bias: bias must be [", y.size(1), "], got ", bias.shape_str());
  if (y.numel() == 0) return;
  add_bias_kernel<<<blocks_for(y.numel(), kThreads), kThreads, 0, as_stream(stream)>>>(mdata(y), cdata(bias),
                                                                                        y.size(0), y.size(1));
  HG_CUDA_CHECK(cudaGetLastError());
}

void embed_rows(const Tensor& table, const Tensor& tokens, Tensor& out, void* stream) {
  check_operand("embed_rows", "table", table, DType::bf16, 2);
  check_operand("embed_rows", "tokens", tokens, DType::i32, 1);
  check_operand("embed_rows", "out", out, DType::bf16, 2);
  HG_CHECK(out.size(0) == tokens.size(0) && out.size(1) == table.size(1), "embed_rows: out must be [",
           tokens.size(0), ", ", table.size(1), "], got ", out.shape_str());
  if (tokens.size(0) == 0) return;
  embed_rows_kernel<<<static_cast<unsigned>(tokens.size(0)), kThreads, 0, as_stream(stream)>>>(
      cdata(table), tokens.data<int>(), mdata(out), static_cast<int>(table.size(1)));
  HG_CUDA_CHECK(cudaGetLastError());
}

void gather_rows(const Tensor& src, const Tensor& index, Tensor& dst, void* stream) {
  check_operand("gather_rows", "index", index, DType::i32, 1);
  HG_CHECK(src.defined() && src.rank() >= 1, "gather_rows: src must be a CUDA tensor [n, ...], got nothing");
  check_operand("gather_rows", "src", src, src.dtype(), src.rank());
  check_operand("gather_rows", "dst", dst, src.dtype(), src.rank());
  const std::int64_t rows = dst.size(0), src_rows = src.size(0);
  HG_CHECK(index.size(0) == rows && (src_rows == 0 ? dst.numel() == 0 : src.numel() / src_rows * rows == dst.numel()),
           "gather_rows: index ", index.shape_str(), " and dst ", dst.shape_str(), " must have one row per index, rows "
           "of src ", src.shape_str());
  if (rows == 0 || dst.numel() == 0) return;
  copy_rows(src.raw(), index.data<int>(), src_rows, dst.raw(), nullptr, rows, rows,
            static_cast<std::int64_t>(dst.bytes()) / rows, stream);
}

void copy_slots(const Tensor& src_slots, const Tensor& dst_slots, Tensor& pool, void* stream) {
  check_operand("copy_slots", "src_slots", src_slots, DType::i32, 1);
  check_operand("copy_slots", "dst_slots", dst_slots, DType::i32, 1);
  HG_CHECK(pool.defined(), "copy_slots: pool must be a contiguous CUDA tensor [slots, Hkv, d], got nothing");
  check_operand("copy_slots", "pool", pool, pool.dtype(), 3);
  HG_CHECK(src_slots.size(0) == dst_slots.size(0), "copy_slots: src_slots ", src_slots.shape_str(), " and dst_slots ",
           dst_slots.shape_str(), " must have the same length");
  const std::int64_t pairs = src_slots.size(0), slots = pool.size(0);
  if (pairs == 0 || pool.numel() == 0) return;
  copy_rows(pool.raw(), src_slots.data<int>(), slots, pool.raw(), dst_slots.data<int>(), slots, pairs,
            static_cast<std::int64_t>(pool.bytes()) / slots, stream);
}

void fill_uniform(Tensor& out, std::uint64_t key, float amplitude, void* stream) {
  HG_CHECK(out.defined() && out.device() == Device::cuda && out.dtype() == DType::bf16 && out.is_contiguous(),
           "fill_uniform: out must be a contiguous CUDA bf16 tensor");
  if (out.numel() == 0) return;
  fill_uniform_kernel<<<blocks_for(out.numel(), kThreads), kThreads, 0, as_stream(stream)>>>(mdata(out), out.numel(),
                                                                                              key, amplitude);
  HG_CUDA_CHECK(cudaGetLastError());
}

}  // namespace hydragen::cuda
