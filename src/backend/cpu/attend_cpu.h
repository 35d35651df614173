// Plain attention on the CPU (src/attn/attend.cpp validates and dispatches here).
#pragma once

#include "hydragen/attention.h"

namespace hydragen::cpu {

// q [T, Hq, d], k and v [S, Hkv, d], any float dtype; f32 state [T, Hq, d].
AttentionState attend(const Tensor& q, const Tensor& k, const Tensor& v, float scale, bool causal);

}  // namespace hydragen::cpu
