#include "hydragen/tensor.h"

#include <cstdlib>
#include <cstring>
#include <sstream>

#include "hydragen/error.h"

#ifdef HYDRAGEN_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace hydragen {

namespace {

#ifdef HYDRAGEN_WITH_CUDA
void cuda_check(cudaError_t status, const char* what) {
  HG_CHECK(status == cudaSuccess, what, ": ", cudaGetErrorString(status));
}
#endif

std::shared_ptr<void> allocate(std::size_t bytes, Device device) {
  const std::size_t padded = bytes == 0 ? 64 : (bytes + 63) / 64 * 64;
  if (device == Device::cpu) {
    void* p = std::aligned_alloc(64, padded);
    HG_CHECK(p != nullptr, "Tensor: out of host memory allocating ", bytes, " bytes");
    return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
  }
#ifdef HYDRAGEN_WITH_CUDA
  void* p = nullptr;
  cuda_check(cudaMalloc(&p, padded), "Tensor: cudaMalloc");
  return std::shared_ptr<void>(p, [](void* q) { cudaFree(q); });
#else
  fail("Tensor: this build has no CUDA backend (configure with -DHYDRAGEN_CUDA=ON)");
#endif
}

std::vector<std::int64_t> contiguous_strides(const std::vector<std::int64_t>& shape) {
  std::vector<std::int64_t> strides(shape.size());
  std::int64_t s = 1;
  for (int i = static_cast<int>(shape.size()) - 1; i >= 0; --i) {
    strides[i] = s;
    s *= shape[i];
  }
  return strides;
}

double load(const void* base, std::int64_t offset, DType dtype) {
  switch (dtype) {
    case DType::f32: return static_cast<const float*>(base)[offset];
    case DType::f64: return static_cast<const double*>(base)[offset];
    case DType::f16: return fp16_to_float(static_cast<const fp16*>(base)[offset]);
    case DType::bf16: return bf16_to_float(static_cast<const bf16*>(base)[offset]);
    case DType::i32: return static_cast<const std::int32_t*>(base)[offset];
  }
  return 0;
}

void store(void* base, std::int64_t offset, DType dtype, double value) {
  switch (dtype) {
    case DType::f32: static_cast<float*>(base)[offset] = static_cast<float>(value); break;
    case DType::f64: static_cast<double*>(base)[offset] = value; break;
    case DType::f16: static_cast<fp16*>(base)[offset] = float_to_fp16(static_cast<float>(value)); break;
    case DType::bf16: static_cast<bf16*>(base)[offset] = float_to_bf16(static_cast<float>(value)); break;
    case DType::i32: static_cast<std::int32_t*>(base)[offset] = static_cast<std::int32_t>(value); break;
  }
}

}  // namespace

const char* device_name(Device device) { return device == Device::cpu ? "cpu" : "cuda"; }

std::string shape_str(const std::vector<std::int64_t>& shape) {
  std::ostringstream out;
  out << '[';
  for (std::size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  out << ']';
  return out.str();
}

Tensor Tensor::wrap(void* data, std::vector<std::int64_t> shape, DType dtype, Device device,
                    std::vector<std::int64_t> strides) {
  HG_CHECK(!shape.empty() && shape.size() <= kMaxRank, "Tensor: rank must be 1..", kMaxRank,
           ", got shape ", hydragen::shape_str(shape));
  for (auto extent : shape) HG_CHECK(extent >= 0, "Tensor: negative extent in shape ", hydragen::shape_str(shape));
  if (strides.empty()) strides = contiguous_strides(shape);
  HG_CHECK(strides.size() == shape.size(), "Tensor: ", strides.size(), " strides for shape ",
           hydragen::shape_str(shape));
  Tensor t;
  t.data_ = data;
  t.rank_ = static_cast<int>(shape.size());
  for (int i = 0; i < t.rank_; ++i) {
    t.shape_[i] = shape[i];
    t.strides_[i] = strides[i];
  }
  t.dtype_ = dtype;
  t.device_ = device;
  return t;
}

Tensor Tensor::empty(std::vector<std::int64_t> shape, DType dtype, Device device) {
  Tensor t = wrap(nullptr, shape, dtype, device);
  t.storage_ = allocate(t.bytes(), device);
  t.data_ = t.storage_.get();
  return t;
}

Tensor Tensor::zeros(std::vector<std::int64_t> shape, DType dtype, Device device) {
  Tensor t = empty(std::move(shape), dtype, device);
  if (device == Device::cpu) {
    std::memset(t.data_, 0, t.bytes());
  } else {
#ifdef HYDRAGEN_WITH_CUDA
    cuda_check(cudaMemset(t.data_, 0, t.bytes()), "Tensor::zeros: cudaMemset");
#endif
  }
  return t;
}

Tensor Tensor::full(std::vector<std::int64_t> shape, double value, DType dtype) {
  Tensor t = empty(std::move(shape), dtype, Device::cpu);
  for (std::int64_t i = 0; i < t.numel(); ++i) store(t.data_, i, dtype, value);
  return t;
}

std::int64_t Tensor::size(int dim) const {
  HG_CHECK(dim >= 0 && dim < rank_, "Tensor::size: dim ", dim, " out of range for shape ", shape_str());
  return shape_[dim];
}

std::int64_t Tensor::stride(int dim) const {
  HG_CHECK(dim >= 0 && dim < rank_, "Tensor::stride: dim ", dim, " out of range for shape ", shape_str());
  return strides_[dim];
}

std::int64_t Tensor::numel() const {
  if (rank_ == 0) return 0;
  std::int64_t n = 1;
  for (int i = 0; i < rank_; ++i) n *= shape_[i];
  return n;
}

bool Tensor::is_contiguous() const {
  std::int64_t expected = 1;
  for (int i = rank_ - 1; i >= 0; --i) {
    if (shape_[i] != 1 && strides_[i] != expected) return false;
    expected *= shape_[i];
  }
  return true;
}

std::string Tensor::shape_str() const { return hydragen::shape_str(shape()); }

namespace {
// Offset in elements of row-major flat index i in a strided tensor.
std::int64_t strided_offset(const std::array<std::int64_t, kMaxRank>& shape,
                            const std::array<std::int64_t, kMaxRank>& strides, int rank,
                            std::int64_t flat) {
  std::int64_t offset = 0;
  for (int d = rank - 1; d >= 0; --d) {
    offset += (flat % shape[d]) * strides[d];
    flat /= shape[d];
  }
  return offset;
}
}  // namespace

double Tensor::get(std::int64_t flat_index) const {
  HG_CHECK(device_ == Device::cpu, "Tensor::get: tensor is on ", device_name(device_));
  HG_CHECK(flat_index >= 0 && flat_index < numel(), "Tensor::get: index ", flat_index,
           " out of range for shape ", shape_str());
  return load(data_, strided_offset(shape_, strides_, rank_, flat_index), dtype_);
}

void Tensor::set(std::int64_t flat_index, double value) {
  HG_CHECK(device_ == Device::cpu, "Tensor::set: tensor is on ", device_name(device_));
  HG_CHECK(flat_index >= 0 && flat_index < numel(), "Tensor::set: index ", flat_index,
           " out of range for shape ", shape_str());
  store(data_, strided_offset(shape_, strides_, rank_, flat_index), dtype_, value);
}

Tensor Tensor::slice(int dim, std::int64_t begin, std::int64_t end) const {
  HG_CHECK(dim >= 0 && dim < rank_, "Tensor::slice: dim ", dim, " out of range for shape ", shape_str());
  HG_CHECK(0 <= begin && begin <= end && end <= shape_[dim], "Tensor::slice: [", begin, ", ", end,
           ") out of range for dim ", dim, " of shape ", shape_str());
  Tensor t = *this;
  t.shape_[dim] = end - begin;
  t.data_ = static_cast<char*>(data_) + begin * strides_[dim] * static_cast<std::int64_t>(dtype_bytes(dtype_));
  return t;
}

Tensor Tensor::select(int dim, std::int64_t index) const {
  HG_CHECK(rank_ > 1, "Tensor::select: cannot drop the only dim of shape ", shape_str());
  Tensor t = slice(dim, index, index + 1);
  for (int i = dim; i + 1 < rank_; ++i) {
    t.shape_[i] = t.shape_[i + 1];
    t.strides_[i] = t.strides_[i + 1];
  }
  t.rank_ = rank_ - 1;
  return t;
}

Tensor Tensor::reshape(std::vector<std::int64_t> shape) const {
  HG_CHECK(is_contiguous(), "Tensor::reshape: tensor of shape ", shape_str(), " is not contiguous");
  Tensor t = wrap(data_, shape, dtype_, device_);
  HG_CHECK(t.numel() == numel(), "Tensor::reshape: cannot view ", shape_str(), " as ", t.shape_str());
  t.storage_ = storage_;
  return t;
}

void Tensor::copy_from(const Tensor& src) {
  HG_CHECK(src.shape() == shape(), "Tensor::copy_from: source shape ", src.shape_str(),
           " differs from destination ", shape_str());
  const bool same_layout = src.dtype_ == dtype_ && src.is_contiguous() && is_contiguous();
  if (device_ == Device::cpu && src.device_ == Device::cpu) {
    if (same_layout) {
      std::memcpy(data_, src.data_, bytes());
      return;
    }
    for (std::int64_t i = 0; i < numel(); ++i) set(i, src.get(i));
    return;
  }
#ifdef HYDRAGEN_WITH_CUDA
  HG_CHECK(src.is_contiguous() && is_contiguous(), "Tensor::copy_from: copies that touch CUDA memory need ",
           "contiguous tensors, got source strides of ", src.shape_str(), " into ", shape_str());
  if (src.dtype_ == dtype_) {
    cuda_check(cudaMemcpy(data_, src.data_, bytes(), cudaMemcpyDefault), "Tensor::copy_from: cudaMemcpy");
    return;
  }
  // A dtype conversion across devices goes through the host.
  Tensor host_src = Tensor::empty(shape(), src.dtype_, Device::cpu);
  cuda_check(cudaMemcpy(host_src.data_, src.data_, src.bytes(), cudaMemcpyDefault), "Tensor::copy_from: cudaMemcpy");
  Tensor host_dst = host_src.to(dtype_);
  cuda_check(cudaMemcpy(data_, host_dst.data_, bytes(), cudaMemcpyDefault), "Tensor::copy_from: cudaMemcpy");
#else
  fail("Tensor::copy_from: this build has no CUDA backend");
#endif
}

Tensor Tensor::to(DType dtype) const {
  Tensor t = empty(shape(), dtype, device_);
  t.copy_from(*this);
  return t;
}

Tensor Tensor::to(Device device) const {
  if (device == device_ && is_contiguous()) return *this;
  Tensor contiguous = is_contiguous() ? *this : clone();
  Tensor t = empty(shape(), dtype_, device);
  t.copy_from(contiguous);
  return t;
}

Tensor Tensor::clone() const {
  Tensor t = empty(shape(), dtype_, device_);
  t.copy_from(*this);
  return t;
}

}  // namespace hydragen
