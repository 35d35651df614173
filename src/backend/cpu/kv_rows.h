// Reading rank-3 [tokens, heads, d] tensors of any CPU dtype as float rows.
#pragma once

#include <cstdint>

#include "hydragen/attention.h"
#include "hydragen/tensor.h"

namespace hydragen::cpu {

// out[j] = scale · t[i0, i1, j] for j < t.size(2); t rank 3 on the CPU, f32/f64/f16/bf16.
template <class T>
void load_row(const Tensor& t, std::int64_t i0, std::int64_t i1, T* out, T scale = T{1});

// Writes run [tokens, heads, d] (any CPU float dtype and strides) at dst as contiguous T rows
// (T float or double); returns the end.
template <class T>
T* copy_rows(const Tensor& run, T* dst);

// A contiguous [tokens, heads, d] copy of t in dtype (f32 or f64).
Tensor contiguous_copy(const Tensor& t, DType dtype);

// One sequence's whole context, its path's segments then its suffix, as one contiguous
// [context_tokens, Hkv, d] tensor of dtype (f32 or f64): the K (or, with values, the V)
// that a per-sequence copy of the prefix would hold.
Tensor sequence_context(const SharingTree& tree, int sequence, bool values, DType dtype);

}  // namespace hydragen::cpu
