// Input validation shared by the public attention entry points. Each check throws a
// hydragen::Error that starts with the entry point's name, names the argument, and states
// the shape it expected.
#pragma once

#include <cstdint>
#include <optional>

#include "hydragen/tensor.h"

namespace hydragen {

// t must be a rank-3 tensor of a float dtype (f32, f64, f16, bf16); `expected` is the shape
// to print, e.g. "[T, Hq, d]".
void check_attention_operand(const char* function, const char* name, const Tensor& t, const char* expected);

// q must be [rows, Hq, d] with Hq a multiple of kv_heads (GQA) and d = head_dim.
void check_query_shape(const char* function, const Tensor& q, std::int64_t rows, const char* rows_name,
                       std::int64_t kv_heads, std::int64_t head_dim);

// A given softmax scale must be finite and positive.
void check_scale(const char* function, const std::optional<float>& scale);

}  // namespace hydragen
