#include "model/model_ops.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/blas.h"
#include "core/thread_pool.h"
#include "hydragen/error.h"

namespace hydragen {

namespace {

// linear's column blocks, and the work (multiply-adds) below which they run on the caller.
constexpr std::int64_t kLinearColumns = 256;
constexpr std::int64_t kLinearParallelMacs = std::int64_t{1} << 20;

void check_f32_matrix(const char* function, const char* name, const Tensor& t) {
  HG_CHECK(t.defined() && t.rank() == 2 && t.dtype() == DType::f32 && t.device() == Device::cpu &&
               t.is_contiguous(),
           function, ": ", name, " must be a contiguous f32 CPU matrix, got ",
           t.defined() ? t.shape_str() : std::string("undefined"));
}

void check_same_shape(const char* function, const Tensor& a, const Tensor& b) {
  check_f32_matrix(function, "the first operand", a);
  check_f32_matrix(function, "the second operand", b);
  HG_CHECK(a.shape() == b.shape(), function, ": shapes differ: ", a.shape_str(), " vs ", b.shape_str());
}

}  // namespace

Tensor embed_rows(const Tensor& table, std::span<const std::int32_t> tokens) {
  check_f32_matrix("embed_rows", "table", table);
  const std::int64_t vocab = table.size(0), hidden = table.size(1);
  Tensor out = Tensor::empty({static_cast<std::int64_t>(tokens.size()), hidden}, DType::f32);
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    HG_CHECK(tokens[i] >= 0 && tokens[i] < vocab, "embed_rows: token ", tokens[i], " at position ", i,
             " is outside the vocabulary [0, ", vocab, ")");
    std::memcpy(out.data<float>() + i * hidden, table.data<float>() + tokens[i] * hidden, hidden * sizeof(float));
  }
  return out;
}

Tensor rms_norm(const Tensor& x, const Tensor& weight, float eps) {
  check_f32_matrix("rms_norm", "x", x);
  const std::int64_t rows = x.size(0), hidden = x.size(1);
  HG_CHECK(weight.rank() == 1 && weight.size(0) == hidden && weight.dtype() == DType::f32, "rms_norm: weight must be f32 [",
           hidden, "], got ", weight.shape_str());
  Tensor out = Tensor::empty({rows, hidden}, DType::f32);
  const float* w = weight.data<float>();
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* in = x.data<float>() + r * hidden;
    float* o = out.data<float>() + r * hidden;
    double sum_squares = 0.0;
    for (std::int64_t i = 0; i < hidden; ++i) sum_squares += static_cast<double>(in[i]) * in[i];
    const float inv_rms = static_cast<float>(1.0 / std::sqrt(sum_squares / hidden + eps));
    for (std::int64_t i = 0; i < hidden; ++i) o[i] = w[i] * (in[i] * inv_rms);
  }
  return out;
}

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& bias) {
  check_f32_matrix("linear", "x", x);
  check_f32_matrix("linear", "w", w);
  const std::int64_t rows = x.size(0), in = x.size(1), out_features = w.size(0);
  HG_CHECK(w.size(1) == in, "linear: w must be [out, ", in, "] for x ", x.shape_str(), ", got ", w.shape_str());
  Tensor y = Tensor::empty({rows, out_features}, DType::f32);
  if (rows == 0) return y;
  float beta = 0.0f;
  if (bias.defined()) {
    HG_CHECK(bias.rank() == 1 && bias.size(0) == out_features && bias.dtype() == DType::f32,
             "linear: bias must be f32 [", out_features, "], got ", bias.shape_str());
    for (std::int64_t r = 0; r < rows; ++r) {
      std::memcpy(y.data<float>() + r * out_features, bias.data<float>(), out_features * sizeof(float));
    }
    beta = 1.0f;
  }
  // Blocks of kLinearColumns output columns, one single-threaded sgemm each, on the process
  // pool. The blocks depend on the shape only, so every output sums in the same order whatever
  // the pool's size or timing.
  use_single_threaded_blas();
  const std::int64_t blocks = (out_features + kLinearColumns - 1) / kLinearColumns;
  auto block = [&](std::int64_t b) {
    const std::int64_t c0 = b * kLinearColumns, n = std::min(kLinearColumns, out_features - c0);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(rows), static_cast<int>(n),
                static_cast<int>(in), 1.0f, x.data<float>(), static_cast<int>(in), w.data<float>() + c0 * in,
                static_cast<int>(in), beta, y.data<float>() + c0, static_cast<int>(out_features));
  };
  if (rows * in * out_features < kLinearParallelMacs) {
    for (std::int64_t b = 0; b < blocks; ++b) block(b);
  } else {
    ThreadPool::global().parallel_for(blocks, block);
  }
  return y;
}

void silu_mul(Tensor& gate, const Tensor& up) {
  check_same_shape("silu_mul", gate, up);
  float* g = gate.data<float>();
  const float* u = up.data<float>();
  for (std::int64_t i = 0, n = gate.numel(); i < n; ++i) g[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
}

void add_into(Tensor& x, const Tensor& y) {
  check_same_shape("add_into", x, y);
  float* a = x.data<float>();
  const float* b = y.data<float>();
  for (std::int64_t i = 0, n = x.numel(); i < n; ++i) a[i] += b[i];
}

void copy_slots(const Tensor& src_slots, const Tensor& dst_slots, Tensor& pool) {
  auto check_slots = [](const char* name, const Tensor& t) {
    HG_CHECK(t.defined() && t.rank() == 1 && t.dtype() == DType::i32 && t.device() == Device::cpu && t.is_contiguous(),
             "copy_slots: ", name, " must be a contiguous i32 CPU tensor [n], got ",
             t.defined() ? concat(t.shape_str(), " ", dtype_name(t.dtype()), " on ", device_name(t.device()))
                         : std::string("nothing"));
  };
  check_slots("src_slots", src_slots);
  check_slots("dst_slots", dst_slots);
  HG_CHECK(src_slots.size(0) == dst_slots.size(0), "copy_slots: src_slots ", src_slots.shape_str(),
           " and dst_slots ", dst_slots.shape_str(), " must have the same length");
  HG_CHECK(pool.defined() && pool.rank() == 3 && pool.device() == Device::cpu && pool.is_contiguous(),
           "copy_slots: pool must be a contiguous CPU tensor [slots, Hkv, d], got ",
           pool.defined() ? pool.shape_str() : std::string("nothing"));
  const std::int64_t n = src_slots.size(0), slots = pool.size(0);
  const std::int32_t* src = src_slots.data<std::int32_t>();
  const std::int32_t* dst = dst_slots.data<std::int32_t>();
  std::vector<std::int32_t> sorted_dst(dst, dst + n);
  std::sort(sorted_dst.begin(), sorted_dst.end());
  for (std::int64_t i = 0; i < n; ++i) {
    HG_CHECK(src[i] >= 0 && src[i] < slots && dst[i] >= 0 && dst[i] < slots, "copy_slots: pair ", i, " copies slot ",
             src[i], " to slot ", dst[i], ", pool ", pool.shape_str(), " has slots [0, ", slots, ")");
    HG_CHECK(!std::binary_search(sorted_dst.begin(), sorted_dst.end(), src[i]), "copy_slots: slot ", src[i],
             " is both a source (pair ", i, ") and a destination");
  }
  HG_CHECK(std::adjacent_find(sorted_dst.begin(), sorted_dst.end()) == sorted_dst.end(),
           "copy_slots: dst_slots names a slot twice");
  const std::size_t row_bytes = pool.bytes() / std::max<std::int64_t>(slots, 1);
  auto* base = static_cast<unsigned char*>(pool.raw());
  for (std::int64_t i = 0; i < n; ++i) std::memcpy(base + dst[i] * row_bytes, base + src[i] * row_bytes, row_bytes);
}

void gather_rows(const Tensor& src, const Tensor& index, Tensor& dst) {
  HG_CHECK(index.defined() && index.rank() == 1 && index.dtype() == DType::i32 && index.device() == Device::cpu &&
               index.is_contiguous(),
           "gather_rows: index must be a contiguous i32 CPU tensor [m], got ",
           index.defined() ? index.shape_str() : std::string("nothing"));
  auto check_rows = [](const char* name, const Tensor& t) {
    HG_CHECK(t.defined() && t.rank() >= 1 && t.device() == Device::cpu && t.is_contiguous(), "gather_rows: ", name,
             " must be a contiguous CPU tensor [rows, ...], got ", t.defined() ? t.shape_str() : std::string("nothing"));
  };
  check_rows("src", src);
  check_rows("dst", dst);
  const std::int64_t rows = dst.size(0), src_rows = src.size(0);
  const std::size_t row_bytes = rows > 0 ? dst.bytes() / static_cast<std::size_t>(rows) : 0;
  HG_CHECK(src.dtype() == dst.dtype() && index.size(0) == rows &&
               (rows == 0 || src_rows * row_bytes == src.bytes()),
           "gather_rows: dst ", dst.shape_str(), " ", dtype_name(dst.dtype()), " must have one row per index (",
           index.shape_str(), ") of src's dtype and row size, src ", src.shape_str(), " ", dtype_name(src.dtype()));
  const std::int32_t* from = index.data<std::int32_t>();
  for (std::int64_t r = 0; r < rows; ++r) {
    HG_CHECK(from[r] >= 0 && from[r] < src_rows, "gather_rows: index[", r, "] = ", from[r], " is outside src's rows [0, ",
             src_rows, ")");
    std::memcpy(static_cast<unsigned char*>(dst.raw()) + r * row_bytes,
                static_cast<const unsigned char*>(src.raw()) + from[r] * row_bytes, row_bytes);
  }
}

}  // namespace hydragen
