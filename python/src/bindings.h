// The parts of the `_hydragen` extension module, each binding one area.
#pragma once

#include <pybind11/pybind11.h>

namespace hydragen::python {

void bind_ops(pybind11::module_& m);  // ops.cpp: the attention ops
void bind_llm(pybind11::module_& m);  // llm.cpp: the engine (LLM)

}  // namespace hydragen::python
