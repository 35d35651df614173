// Arrays in and out of the extension through DLPack, without copies: a NumPy array or a torch
// tensor (CPU or CUDA) is viewed as a hydragen::Tensor; a result Tensor leaves as a capsule
// that NumPy or torch adopts (the capsule owns a reference to the Tensor's storage).
#pragma once

#include <memory>
#include <string>

#include <pybind11/pybind11.h>

#include "hydragen/tensor.h"

namespace hydragen::python {

// A Tensor viewing an object's memory (anything with __dlpack__), kept valid while this lives.
class BorrowedTensor {
 public:
  // `name` is the argument's name for errors (ValueError naming it).
  BorrowedTensor(const pybind11::handle& object, const std::string& name);
  BorrowedTensor(BorrowedTensor&&) noexcept = default;
  BorrowedTensor& operator=(BorrowedTensor&&) noexcept = default;
  const Tensor& tensor() const { return tensor_; }

 private:
  std::shared_ptr<void> owner_;  // calls the producer's deleter
  Tensor tensor_;
};

// A "dltensor" capsule over `tensor` (its storage kept alive until the consumer is done).
pybind11::capsule to_dlpack(const Tensor& tensor);

}  // namespace hydragen::python
