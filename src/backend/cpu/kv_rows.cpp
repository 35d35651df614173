#include "backend/cpu/kv_rows.h"

#include "hydragen/error.h"

namespace hydragen::cpu {

template <class T>
void load_row(const Tensor& t, std::int64_t i0, std::int64_t i1, T* out, T scale) {
  const std::int64_t d = t.size(2), step = t.stride(2);
  const std::int64_t offset = i0 * t.stride(0) + i1 * t.stride(1);
  // One switch per row, not per element: this is the inner loop of every dtype conversion.
  switch (t.dtype()) {
    case DType::f32: {
      const float* p = t.data<float>() + offset;
      for (std::int64_t j = 0; j < d; ++j) out[j] = scale * static_cast<T>(p[j * step]);
      return;
    }
    case DType::f64: {
      const double* p = t.data<double>() + offset;
      for (std::int64_t j = 0; j < d; ++j) out[j] = scale * static_cast<T>(p[j * step]);
      return;
    }
    case DType::f16: {
      const fp16* p = t.data<fp16>() + offset;
      for (std::int64_t j = 0; j < d; ++j) out[j] = scale * static_cast<T>(fp16_to_float(p[j * step]));
      return;
    }
    case DType::bf16: {
      const bf16* p = t.data<bf16>() + offset;
      for (std::int64_t j = 0; j < d; ++j) out[j] = scale * static_cast<T>(bf16_to_float(p[j * step]));
      return;
    }
    case DType::i32: break;
  }
  fail("load_row: expected an f32, f64, f16 or bf16 tensor, got ", dtype_name(t.dtype()));
}

template void load_row<float>(const Tensor&, std::int64_t, std::int64_t, float*, float);
template void load_row<double>(const Tensor&, std::int64_t, std::int64_t, double*, double);

template <class T>
T* copy_rows(const Tensor& run, T* dst) {
  const std::int64_t heads = run.size(1), d = run.size(2);
  for (std::int64_t t = 0; t < run.size(0); ++t)
    for (std::int64_t h = 0; h < heads; ++h, dst += d) load_row(run, t, h, dst);
  return dst;
}

template float* copy_rows<float>(const Tensor&, float*);
template double* copy_rows<double>(const Tensor&, double*);

namespace {

Tensor concatenate(const std::vector<const Tensor*>& runs, std::int64_t heads, std::int64_t d, DType dtype) {
  std::int64_t tokens = 0;
  for (const Tensor* run : runs) tokens += run->size(0);
  Tensor out = Tensor::empty({tokens, heads, d}, dtype);
  HG_CHECK(dtype == DType::f32 || dtype == DType::f64, "concatenate: dtype must be f32 or f64, got ",
           dtype_name(dtype));
  float* dst32 = out.data<float>();
  double* dst64 = out.data<double>();
  for (const Tensor* run : runs) {
    if (dtype == DType::f32) dst32 = copy_rows(*run, dst32);
    else dst64 = copy_rows(*run, dst64);
  }
  return out;
}

}  // namespace

Tensor contiguous_copy(const Tensor& t, DType dtype) { return concatenate({&t}, t.size(1), t.size(2), dtype); }

Tensor sequence_context(const SharingTree& tree, int sequence, bool values, DType dtype) {
  std::vector<const Tensor*> runs;
  for (int segment : tree.path(sequence))
    runs.push_back(values ? &tree.segments[segment].v : &tree.segments[segment].k);
  const Sequence& s = tree.sequences[sequence];
  runs.push_back(values ? &s.v : &s.k);
  return concatenate(runs, s.k.size(1), s.k.size(2), dtype);
}

}  // namespace hydragen::cpu
