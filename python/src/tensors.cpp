#include "tensors.h"

#include <vector>

#include "dlpack.h"
#include "hydragen/error.h"

namespace py = pybind11;

namespace hydragen::python {

namespace {

DType dtype_of(const DLDataType& t, const std::string& name) {
  HG_CHECK(t.lanes == 1, name, ": vector dtypes (", int{t.lanes}, " lanes) are not supported");
  if (t.code == kDLFloat && t.bits == 32) return DType::f32;
  if (t.code == kDLFloat && t.bits == 64) return DType::f64;
  if (t.code == kDLFloat && t.bits == 16) return DType::f16;
  if (t.code == kDLBfloat && t.bits == 16) return DType::bf16;
  if (t.code == kDLInt && t.bits == 32) return DType::i32;
  fail(name, ": dtype code ", int{t.code}, " of ", int{t.bits}, " bits is not one of float32, float64, float16, ",
       "bfloat16, int32");
}

DLDataType dl_dtype(DType dtype) {
  switch (dtype) {
    case DType::f32: return {kDLFloat, 32, 1};
    case DType::f64: return {kDLFloat, 64, 1};
    case DType::f16: return {kDLFloat, 16, 1};
    case DType::bf16: return {kDLBfloat, 16, 1};
    case DType::i32: return {kDLInt, 32, 1};
  }
  fail("to_dlpack: unknown dtype");
}

// What a capsule we hand out owns: the Tensor (its storage) and the shape/stride arrays.
struct Exported {
  DLManagedTensor managed{};
  Tensor tensor;
  std::vector<std::int64_t> shape, strides;
};

void delete_exported(DLManagedTensor* self) { delete static_cast<Exported*>(self->manager_ctx); }

}  // namespace

BorrowedTensor::BorrowedTensor(const py::handle& object, const std::string& name) {
  HG_CHECK(py::hasattr(object, "__dlpack__"), name, ": expected a NumPy array or a torch tensor (an object with ",
           "__dlpack__), got ", std::string(py::str(py::type::of(object).attr("__name__"))));
  py::object capsule;
  try {
    // A CUDA producer orders its work before the legacy default stream (DLPack's stream 1), where ours runs.
    const bool cuda = py::hasattr(object, "__dlpack_device__") &&
                      py::cast<int>(object.attr("__dlpack_device__")().cast<py::tuple>()[0]) == kDLCUDA;
    capsule = cuda ? object.attr("__dlpack__")(py::arg("stream") = 1) : object.attr("__dlpack__")();
  } catch (py::error_already_set& e) {
    fail(name, ": its __dlpack__ failed: ", e.what());
  }
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), "dltensor"));
  HG_CHECK(managed != nullptr, name, ": __dlpack__ did not return a 'dltensor' capsule");
  PyCapsule_SetName(capsule.ptr(), "used_dltensor");  // ours now: we call its deleter
  owner_ = std::shared_ptr<void>(managed, [](void* p) {
    auto* m = static_cast<DLManagedTensor*>(p);
    if (m->deleter != nullptr) m->deleter(m);
  });
  const DLTensor& t = managed->dl_tensor;
  HG_CHECK(t.ndim >= 1 && t.ndim <= kMaxRank, name, ": rank ", t.ndim, " is not in [1, ", kMaxRank, "]");
  const DType dtype = dtype_of(t.dtype, name);
  Device device = Device::cpu;
  if (t.device.device_type == kDLCUDA) device = Device::cuda;
  else HG_CHECK(t.device.device_type == kDLCPU, name, ": device type ", int{t.device.device_type}, " is neither CPU nor CUDA");
  std::vector<std::int64_t> shape(t.shape, t.shape + t.ndim), strides;
  if (t.strides != nullptr) {
    strides.assign(t.strides, t.strides + t.ndim);
    // A size-1 dimension's stride is arbitrary (torch and NumPy give any value): make it contiguous's.
    std::int64_t dense = 1;
    for (int i = t.ndim - 1; i >= 0; --i) {
      if (shape[i] == 1) strides[i] = dense;
      dense *= shape[i];
    }
  }
  tensor_ = Tensor::wrap(static_cast<char*>(t.data) + t.byte_offset, shape, dtype, device, strides);
}

py::capsule to_dlpack(const Tensor& tensor) {
  auto* e = new Exported;
  e->tensor = tensor;
  e->shape = tensor.shape();
  for (int i = 0; i < tensor.rank(); ++i) e->strides.push_back(tensor.stride(i));
  DLTensor& t = e->managed.dl_tensor;
  t.data = tensor.raw();
  t.device = {tensor.device() == Device::cuda ? kDLCUDA : kDLCPU, 0};
  t.ndim = tensor.rank();
  t.dtype = dl_dtype(tensor.dtype());
  t.shape = e->shape.data();
  t.strides = e->strides.data();
  t.byte_offset = 0;
  e->managed.manager_ctx = e;
  e->managed.deleter = delete_exported;
  // A capsule never consumed ("dltensor" still) frees itself; a consumer renames it and calls the deleter.
  return py::capsule(&e->managed, "dltensor", [](PyObject* capsule) {
    if (PyCapsule_IsValid(capsule, "dltensor")) {
      auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
      m->deleter(m);
    }
  });
}

}  // namespace hydragen::python
