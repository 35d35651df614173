// Tensor: a strided view of up to 4 dimensions over CPU or CUDA memory. Copies share the
// storage (like a shared_ptr); `clone` copies the elements.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "hydragen/dtype.h"

namespace hydragen {

enum class Device : std::uint8_t { cpu, cuda };
const char* device_name(Device device);

inline constexpr int kMaxRank = 4;

class Tensor {
 public:
  Tensor() = default;

  // Uninitialised storage, contiguous (row-major).
  static Tensor empty(std::vector<std::int64_t> shape, DType dtype, Device device = Device::cpu);
  static Tensor zeros(std::vector<std::int64_t> shape, DType dtype, Device device = Device::cpu);
  // A filled CPU tensor.
  static Tensor full(std::vector<std::int64_t> shape, double value, DType dtype);
  // A view of memory owned by someone else; contiguous unless strides (in elements) are given.
  static Tensor wrap(void* data, std::vector<std::int64_t> shape, DType dtype,
                     Device device = Device::cpu, std::vector<std::int64_t> strides = {});

  bool defined() const { return rank_ > 0; }
  int rank() const { return rank_; }
  std::int64_t size(int dim) const;
  std::int64_t stride(int dim) const;
  std::vector<std::int64_t> shape() const { return {shape_.begin(), shape_.begin() + rank_}; }
  std::int64_t numel() const;
  std::size_t bytes() const { return static_cast<std::size_t>(numel()) * dtype_bytes(dtype_); }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  bool is_contiguous() const;
  std::string shape_str() const;  // "[2, 8, 128]"

  void* raw() const { return data_; }
  template <class T>
  T* data() const { return static_cast<T*>(data_); }

  // Element i of the flattened (row-major) index space, converted to double; CPU only.
  double get(std::int64_t flat_index) const;
  void set(std::int64_t flat_index, double value);

  // Views sharing the storage.
  Tensor slice(int dim, std::int64_t begin, std::int64_t end) const;  // [begin, end) of dim
  Tensor reshape(std::vector<std::int64_t> shape) const;             // contiguous only
  Tensor select(int dim, std::int64_t index) const;                    // drops dim

  // Element copies: a contiguous tensor of another dtype and/or device.
  Tensor to(DType dtype) const;
  Tensor to(Device device) const;
  Tensor clone() const;
  // Copies src's elements into this tensor (same shape; any dtypes; CPU or CUDA).
  void copy_from(const Tensor& src);

 private:
  std::shared_ptr<void> storage_;
  void* data_ = nullptr;
  std::array<std::int64_t, kMaxRank> shape_{};
  std::array<std::int64_t, kMaxRank> strides_{};
  int rank_ = 0;
  DType dtype_ = DType::f32;
  Device device_ = Device::cpu;
};

std::string shape_str(const std::vector<std::int64_t>& shape);

}  // namespace hydragen
