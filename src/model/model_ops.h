// The CPU fp32 building blocks of the Llama forward pass, on contiguous row-major tensors
// [rows, features]. Each will have a CUDA twin (bf16) compared against it in a test.
#pragma once

#include <cstdint>
#include <span>

#include "hydragen/tensor.h"

namespace hydragen {

// Rows of `table` [vocab, hidden] for each token: [tokens, hidden]. Out-of-range ids throw.
Tensor embed_rows(const Tensor& table, std::span<const std::int32_t> tokens);

// RMSNorm: out = x / sqrt(mean(x^2) + eps) * weight, per row of x [rows, hidden].
Tensor rms_norm(const Tensor& x, const Tensor& weight, float eps);

// y = x W^T (+ bias): x [rows, in], w [out, in] (PyTorch's Linear layout), bias [out] or
// undefined. Single-threaded OpenBLAS sgemms over blocks of output columns, spread over
// ThreadPool::global() (so not from inside one of its parallel_for bodies); the same bits for
// the same inputs whatever the thread count.
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& bias = {});

// gate = silu(gate) * up, in place; silu(g) = g / (1 + e^-g). Same shapes.
void silu_mul(Tensor& gate, const Tensor& up);

// x += y, in place (the residual add). Same shapes.
void add_into(Tensor& x, const Tensor& y);

// Copies K/V rows inside a page pool (the dense baseline's per-sequence copy of its prefix):
// row dst_slots[i] = row src_slots[i] for every i. pool [slots, Hkv, d] of any dtype, a page
// pool viewed with slot = page * page_size + offset; src_slots, dst_slots i32 [n]. Every slot
// must lie in the pool, destinations must be distinct and no destination may be a source.
void copy_slots(const Tensor& src_slots, const Tensor& dst_slots, Tensor& pool);

// dst row r = src row index[r] (rows: the first dimension; any dtype, copied as bytes). src
// [n, ...] and dst [m, ...] contiguous CPU tensors of one dtype and row size, index i32 [m],
// every index in [0, n).
void gather_rows(const Tensor& src, const Tensor& index, Tensor& dst);

}  // namespace hydragen
