// The `hydragen._hydragen` extension: hydragen::Error becomes ValueError (its message names the
// argument or field at fault).
#include "bindings.h"
#include "hydragen/error.h"

PYBIND11_MODULE(_hydragen, m) {
  m.doc() = "hydragen's C++ core: the attention ops and the engine (use the `hydragen` package)";
  pybind11::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const hydragen::Error& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    }
  });
#ifdef HYDRAGEN_WITH_CUDA
  m.attr("cuda_built") = true;
#else
  m.attr("cuda_built") = false;
#endif
  hydragen::python::bind_ops(m);
  hydragen::python::bind_llm(m);
}
