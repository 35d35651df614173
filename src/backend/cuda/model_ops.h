// The fused CUDA ops of the Llama forward pass, bf16 storage with fp32 math. Each has a CPU
// twin in src/model/ (model_ops.h, rope.h, weights.h) and tests/test_cuda_model_ops.cpp
// compares both on the same random inputs. Host-only header: no CUDA types, streams are
// passed as void* (a cudaStream_t; nullptr is the default stream). All tensors are
// contiguous CUDA tensors; shapes are checked and errors name the argument.
#pragma once

#include <cstdint>

#include "hydragen/tensor.h"

namespace hydragen::cuda {

// residual += delta (when delta is defined), then out = RMSNorm(residual) * weight.
// residual, delta, out bf16 [rows, hidden]; weight bf16 [hidden].
// Twin: add_into + rms_norm.
void add_rms_norm(Tensor& residual, const Tensor& delta, const Tensor& weight, float eps, Tensor& out,
                  void* stream = nullptr);

// Qwen3's q/k norm, in place on qkv bf16 [rows, (q_heads + 2 kv_heads) * head_dim] (the fused
// QKV GEMM's output, before RoPE): each q head becomes RMSNorm(head) * q_weight and each k head
// RMSNorm(head) * k_weight (weights bf16 [head_dim]); v is untouched. Twin: rms_norm per head.
void qk_rms_norm(Tensor& qkv, std::int64_t q_heads, std::int64_t kv_heads, const Tensor& q_weight,
                 const Tensor& k_weight, float eps, void* stream = nullptr);

// qkv bf16 [rows, (q_heads + 2 kv_heads) * head_dim], the fused QKV GEMM's output: rotates
// the q and k heads in place by RoPE (positions i32 [rows], inv_freq f32 [head_dim / 2]) and
// writes row r's rotated k and its v to slot slots[r] (i32 [rows]) of k_cache / v_cache,
// bf16 [slots, kv_heads, head_dim]: a page pool with slot = page * page_size + offset.
// q_out (bf16, contiguous, rows x q_heads x head_dim elements), where given, receives the
// rotated q heads instead of qkv, and qkv is then left as it was (the rotated k goes to
// k_cache only): the attention's contiguous q without a copy out of the strided qkv rows,
// and no write-back nobody reads.
// Twin: apply_rope + the slot writes of Llama::forward_paged.
void rope_append_kv(Tensor& qkv, std::int64_t q_heads, std::int64_t kv_heads, const Tensor& positions,
                    const Tensor& inv_freq, const Tensor& slots, Tensor& k_cache, Tensor& v_cache,
                    Tensor* q_out = nullptr, void* stream = nullptr);

// out = silu(gate) * up for gate_up bf16 [rows, 2 * inter] = [gate | up] (the fused
// gate/up GEMM's output); out bf16 [rows, inter]. Twin: silu_mul.
void silu_mul(const Tensor& gate_up, Tensor& out, void* stream = nullptr);

// x += y, bf16 [rows, cols]. Twin: add_into.
void add_into(Tensor& x, const Tensor& y, void* stream = nullptr);

// out = x W^T: x bf16 [rows, in], w bf16 [out, in] (PyTorch's Linear layout), out bf16 or
// f32 [rows, out] (f32 for logits, so greedy argmax sees no bf16 ties); one cuBLAS GEMM with
// fp32 accumulation. Twin: linear.
void linear(const Tensor& x, const Tensor& w, Tensor& out, void* stream = nullptr);
// Makes now what linear makes on its first call on this thread and stream: the cuBLAS handle,
// its library state and its workspace. A runner calls it before handing the free memory to its
// K/V pool, or that first call would find none left.
void prepare_linear(void* stream = nullptr);

// y[r] += bias for every row r: y bf16 [rows, n], bias bf16 [n]. Twin: linear's bias.
void add_bias(Tensor& y, const Tensor& bias, void* stream = nullptr);

// out[r] = table[tokens[r]]: table bf16 [vocab, hidden], tokens i32 [rows] (device), out
// bf16 [rows, hidden]. Ids outside the vocabulary must be rejected by the caller. Twin: embed_rows.
void embed_rows(const Tensor& table, const Tensor& tokens, Tensor& out, void* stream = nullptr);

// Copies K/V rows inside a page pool: row dst_slots[i] = row src_slots[i] for every i (the
// dense baseline's per-sequence copies). pool bf16 [slots, Hkv, d] (any dtype works: rows are
// copied as bytes); src_slots, dst_slots i32 [n] on the device. Destinations must be distinct
// and disjoint from the sources (not checked here: the slots live on the device); a pair with
// a slot outside [0, slots) is skipped, never read or written. Twin: copy_slots.
void copy_slots(const Tensor& src_slots, const Tensor& dst_slots, Tensor& pool, void* stream = nullptr);

// dst row r = src row index[r] (rows: the first dimension; any dtype, copied as bytes): the
// engine's input tokens of a step fed from the sampled tokens of the step before. src [n, ...]
// and dst [m, ...] of one dtype and row size, index i32 [m] on the device; an index outside
// [0, n) leaves its row unwritten (not checked here: the index lives on the device). Twin:
// gather_rows.
void gather_rows(const Tensor& src, const Tensor& index, Tensor& dst, void* stream = nullptr);

// Fills a bf16 tensor on the device with amplitude * counter_uniform(key, i): the same
// values random_weights makes on the CPU (before its bf16 rounding). Twin: random_weights.
void fill_uniform(Tensor& out, std::uint64_t key, float amplitude, void* stream = nullptr);

}  // namespace hydragen::cuda
