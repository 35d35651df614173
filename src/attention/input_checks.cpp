#include "attention/input_checks.h"

#include <cmath>

#include "hydragen/error.h"

namespace hydragen {

void check_attention_operand(const char* function, const char* name, const Tensor& t, const char* expected) {
  HG_CHECK(t.defined(), function, ": ", name, " is undefined, expected ", expected);
  HG_CHECK(t.rank() == 3, function, ": ", name, " has rank ", t.rank(), " (shape ", t.shape_str(), "), expected ",
           expected);
  const DType dtype = t.dtype();
  HG_CHECK(dtype == DType::f32 || dtype == DType::f64 || dtype == DType::f16 || dtype == DType::bf16, function,
           ": ", name, " has dtype ", dtype_name(dtype), ", expected f32, f16, bf16 or f64");
}

void check_query_shape(const char* function, const Tensor& q, std::int64_t rows, const char* rows_name,
                       std::int64_t kv_heads, std::int64_t head_dim) {
  check_attention_operand(function, "q", q, "[rows, Hq, d]");
  const auto expected = concat("[", rows_name, "=", rows, ", Hq = G·Hkv (Hkv=", kv_heads, "), d=", head_dim, "]");
  HG_CHECK(q.size(0) == rows && q.size(2) == head_dim, function, ": q has shape ", q.shape_str(), ", expected ",
           expected);
  HG_CHECK(q.size(1) > 0 && q.size(1) % kv_heads == 0, function, ": q has Hq=", q.size(1),
           " heads, not a multiple of Hkv=", kv_heads, " (shape ", q.shape_str(), ", expected ", expected, ")");
}

void check_scale(const char* function, const std::optional<float>& scale) {
  HG_CHECK(!scale || (std::isfinite(*scale) && *scale > 0), function, ": options.scale is ", *scale,
           ", expected a finite number > 0");
}

}  // namespace hydragen
