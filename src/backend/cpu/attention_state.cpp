// AttentionState::empty and merge_states (two-way in place, n-way).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/state_merge.h"
#include "hydragen/error.h"

namespace hydragen {

namespace cpu {

void merge_state_rows(std::span<const float* const> o_in, std::span<const float> lse_in,
                      std::int64_t head_dim, float* o_out, float* lse_out) {
  const std::size_t n = lse_in.size();
  float max_lse = -std::numeric_limits<float>::infinity();
  for (float lse : lse_in) max_lse = std::isnan(lse) || lse > max_lse ? lse : max_lse;  // a NaN state stays NaN
  if (max_lse == -std::numeric_limits<float>::infinity()) {
    // Every input is empty; exp(-inf - -inf) would be NaN, so say it directly.
    std::fill(o_out, o_out + head_dim, 0.0f);
    *lse_out = max_lse;
    return;
  }
  // Weights relative to the largest lse lie in (0, 1]: no overflow whatever the lse range.
  float weights[16];
  std::vector<float> many_weights(n > 16 ? n : 0);
  float* w = n > 16 ? many_weights.data() : weights;
  float total = 0;
  for (std::size_t i = 0; i < n; ++i) total += (w[i] = std::exp(lse_in[i] - max_lse));
  for (std::int64_t j = 0; j < head_dim; ++j) {
    float sum = 0;
    for (std::size_t i = 0; i < n; ++i)
      if (w[i] != 0) sum += w[i] * o_in[i][j];  // skip empties: their o may be anything finite or not
    o_out[j] = sum / total;
  }
  *lse_out = max_lse + std::log(total);
}

AttentionState poisoned_state(std::int64_t rows, std::int64_t heads, std::int64_t head_dim) {
  AttentionState state{Tensor::empty({rows, heads, head_dim}, DType::f32), Tensor::empty({rows, heads}, DType::f32)};
  for (Tensor* t : {&state.o, &state.lse})
    std::fill_n(t->data<float>(), t->numel(), std::numeric_limits<float>::quiet_NaN());
  return state;
}

}  // namespace cpu

namespace {

void check_state(const AttentionState& state, const char* name) {
  HG_CHECK(state.o.defined() && state.o.rank() == 3, "merge_states: ", name, ".o has shape ",
           state.o.defined() ? state.o.shape_str() : "[]", ", expected [rows, Hq, d]");
  const std::vector<std::int64_t> lse_shape{state.o.size(0), state.o.size(1)};
  HG_CHECK(state.lse.defined() && state.lse.shape() == lse_shape, "merge_states: ", name, ".lse has shape ",
           state.lse.defined() ? state.lse.shape_str() : "[]", ", expected [rows=", lse_shape[0], ", Hq=",
           lse_shape[1], "]");
  for (const Tensor* t : {&state.o, &state.lse})
    HG_CHECK(t->dtype() == DType::f32 && t->device() == Device::cpu && t->is_contiguous(), "merge_states: ",
             name, " must be contiguous f32 on the cpu, got ", dtype_name(t->dtype()), " on ",
             device_name(t->device()), t->is_contiguous() ? "" : " (strided)");
}

}  // namespace

AttentionState AttentionState::empty(std::int64_t rows, std::int64_t heads, std::int64_t head_dim,
                                     Device device) {
  AttentionState state{Tensor::zeros({rows, heads, head_dim}, DType::f32),
                       Tensor::full({rows, heads}, -std::numeric_limits<double>::infinity(), DType::f32)};
  if (device != Device::cpu) {
    state.o = state.o.to(device);
    state.lse = state.lse.to(device);
  }
  return state;
}

void merge_states(AttentionState& into, const AttentionState& other) {
  check_state(into, "into");
  check_state(other, "other");
  HG_CHECK(into.o.shape() == other.o.shape(), "merge_states: other.o has shape ", other.o.shape_str(),
           ", expected the shape of into.o ", into.o.shape_str());
  const std::int64_t d = into.head_dim();
  const std::int64_t rows_heads = into.rows() * into.heads();
  float* o = into.o.data<float>();
  float* lse = into.lse.data<float>();
  const float* other_o = other.o.data<float>();
  const float* other_lse = other.lse.data<float>();
  for (std::int64_t r = 0; r < rows_heads; ++r) {
    const float* o_in[2] = {o + r * d, other_o + r * d};
    const float lse_in[2] = {lse[r], other_lse[r]};
    cpu::merge_state_rows(o_in, lse_in, d, o + r * d, lse + r);
  }
}

AttentionState merge_states(std::span<const AttentionState> states) {
  HG_CHECK(!states.empty(), "merge_states: expected at least one state, got none");
  for (std::size_t i = 0; i < states.size(); ++i) {
    const std::string name = "states[" + std::to_string(i) + "]";
    check_state(states[i], name.c_str());
    HG_CHECK(states[i].o.shape() == states[0].o.shape(), "merge_states: ", name, ".o has shape ",
             states[i].o.shape_str(), ", expected the shape of states[0].o ", states[0].o.shape_str());
  }
  const std::int64_t rows = states[0].rows(), heads = states[0].heads(), d = states[0].head_dim();
  AttentionState out = cpu::poisoned_state(rows, heads, d);
  std::vector<const float*> o_in(states.size());
  std::vector<float> lse_in(states.size());
  for (std::int64_t r = 0; r < rows * heads; ++r) {
    for (std::size_t i = 0; i < states.size(); ++i) {
      o_in[i] = states[i].o.data<float>() + r * d;
      lse_in[i] = states[i].lse.data<float>()[r];
    }
    cpu::merge_state_rows(o_in, lse_in, d, out.o.data<float>() + r * d, out.lse.data<float>() + r);
  }
  return out;
}

}  // namespace hydragen
