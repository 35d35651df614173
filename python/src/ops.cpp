// hydragen.ops: tree_attention and hydragen_attention on DLPack arrays (include/hydragen/attention.h).
#include <optional>

#include <pybind11/stl.h>

#include "bindings.h"
#include "hydragen/attention.h"
#include "hydragen/error.h"
#include "tensors.h"

namespace py = pybind11;

namespace hydragen::python {

namespace {

TreeAttentionOptions options_of(std::optional<float> scale, bool causal, const std::string& mode, int page_size) {
  TreeAttentionOptions o;
  o.scale = scale;
  o.causal = causal;
  o.mode = parse_mode(mode);
  o.page_size = page_size;
  return o;
}

// The data pointers of the last call's inputs and outputs, for the tests' zero-copy checks.
py::dict& last_pointers() {
  static py::dict* pointers = new py::dict;
  return *pointers;
}

py::tuple result(const AttentionState& state, const std::vector<std::pair<std::string, const BorrowedTensor*>>& inputs) {
  py::dict& p = last_pointers();
  p.clear();
  for (const auto& [name, t] : inputs) p[py::str(name)] = reinterpret_cast<std::uintptr_t>(t->tensor().raw());
  p["o"] = reinterpret_cast<std::uintptr_t>(state.o.raw());
  p["lse"] = reinterpret_cast<std::uintptr_t>(state.lse.raw());
  return py::make_tuple(to_dlpack(state.o), to_dlpack(state.lse));
}

// segments: [(parent, k, v)], sequences: [(parent, k, v, query_tokens)]; parent -1 for none.
py::tuple tree_attention_py(const py::list& segments, const py::list& sequences, const py::handle& q,
                            std::optional<float> scale, bool causal, const std::string& mode, int page_size) {
  const TreeAttentionOptions options = options_of(scale, causal, mode, page_size);
  std::vector<BorrowedTensor> held;
  held.reserve(2 * (segments.size() + sequences.size()) + 1);
  SharingTree tree;
  for (std::size_t i = 0; i < segments.size(); ++i) {
    const auto s = segments[i].cast<py::tuple>();
    const std::string name = "segments[" + std::to_string(i) + "]";
    Segment seg;
    seg.parent = s[0].cast<int>();
    seg.k = held.emplace_back(s[1], name + ".k").tensor();
    seg.v = held.emplace_back(s[2], name + ".v").tensor();
    tree.segments.push_back(seg);
  }
  for (std::size_t i = 0; i < sequences.size(); ++i) {
    const auto s = sequences[i].cast<py::tuple>();
    const std::string name = "sequences[" + std::to_string(i) + "]";
    Sequence seq;
    seq.parent = s[0].cast<int>();
    seq.k = held.emplace_back(s[1], name + ".k").tensor();
    seq.v = held.emplace_back(s[2], name + ".v").tensor();
    seq.query_tokens = s[3].cast<std::int64_t>();
    tree.sequences.push_back(seq);
  }
  const BorrowedTensor& q_t = held.emplace_back(q, "q");
  AttentionState state;
  {
    py::gil_scoped_release unlocked;
    state = tree_attention(tree, q_t.tensor(), options);
  }
  return result(state, {{"q", &q_t}});
}

py::tuple hydragen_attention_py(const py::handle& q, const py::handle& prefix_k, const py::handle& prefix_v,
                                const py::handle& suffix_k, const py::handle& suffix_v,
                                const std::vector<std::int64_t>& suffix_lens, std::optional<float> scale, bool causal,
                                const std::string& mode, int page_size) {
  const TreeAttentionOptions options = options_of(scale, causal, mode, page_size);
  const BorrowedTensor tq(q, "q"), pk(prefix_k, "prefix_k"), pv(prefix_v, "prefix_v"), sk(suffix_k, "suffix_k"),
      sv(suffix_v, "suffix_v");
  AttentionState state;
  {
    py::gil_scoped_release unlocked;
    state = hydragen_attention(tq.tensor(), pk.tensor(), pv.tensor(), sk.tensor(), sv.tensor(), suffix_lens, options);
  }
  return result(state, {{"q", &tq}, {"prefix_k", &pk}, {"prefix_v", &pv}, {"suffix_k", &sk}, {"suffix_v", &sv}});
}

}  // namespace

void bind_ops(py::module_& m) {
  m.def("tree_attention", &tree_attention_py, py::arg("segments"), py::arg("sequences"), py::arg("q"),
        py::arg("scale") = std::nullopt, py::arg("causal") = true, py::arg("mode") = "hydragen",
        py::arg("page_size") = 64);
  m.def("hydragen_attention", &hydragen_attention_py, py::arg("q"), py::arg("prefix_k"), py::arg("prefix_v"),
        py::arg("suffix_k"), py::arg("suffix_v"), py::arg("suffix_lens"), py::arg("scale") = std::nullopt,
        py::arg("causal") = true, py::arg("mode") = "hydragen", py::arg("page_size") = 64);
  m.def("_last_pointers", [] { return last_pointers(); },
        "Data pointers of the last op call's inputs and outputs as the extension saw them (zero-copy checks).");
}

}  // namespace hydragen::python
