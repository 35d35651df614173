// SharingTree validation and the queries every attention mode asks of a tree.
#include <string>
#include <vector>

#include "hydragen/attention.h"
#include "hydragen/error.h"

namespace hydragen {

namespace {

// The first K/V tensor of the tree fixes Hkv, d, dtype and device; every other one must match.
struct KvReference {
  const Tensor* tensor = nullptr;
  std::string name;  // "segment 0 k", for messages
};

void check_kv_pair(const Tensor& k, const Tensor& v, const std::string& node, KvReference& reference) {
  for (const auto& [tensor, which] : {std::pair<const Tensor*, const char*>{&k, "k"}, {&v, "v"}}) {
    HG_CHECK(tensor->defined(), "SharingTree: ", node, " ", which,
             " is undefined, expected [len, Hkv, d] (use length 0 for an empty run)");
    HG_CHECK(tensor->rank() == 3, "SharingTree: ", node, " ", which, " has rank ", tensor->rank(),
             " (shape ", tensor->shape_str(), "), expected [len, Hkv, d]");
  }
  HG_CHECK(k.shape() == v.shape(), "SharingTree: ", node, " v has shape ", v.shape_str(),
           ", expected the shape of its k ", k.shape_str());
  HG_CHECK(k.dtype() == v.dtype() && k.device() == v.device(), "SharingTree: ", node, " k is ",
           dtype_name(k.dtype()), " on ", device_name(k.device()), " but v is ", dtype_name(v.dtype()),
           " on ", device_name(v.device()), ", expected the same dtype and device");
  if (reference.tensor == nullptr) {
    HG_CHECK(k.size(1) >= 1 && k.size(2) >= 1, "SharingTree: ", node, " k has shape ", k.shape_str(),
             ", expected [len, Hkv >= 1, d >= 1]");
    reference = {&k, node + " k"};
    return;
  }
  const Tensor& r = *reference.tensor;
  HG_CHECK(k.size(1) == r.size(1) && k.size(2) == r.size(2), "SharingTree: ", node, " k has shape ",
           k.shape_str(), ", expected [len, Hkv=", r.size(1), ", d=", r.size(2), "] (as ", reference.name,
           " ", r.shape_str(), ")");
  HG_CHECK(k.dtype() == r.dtype() && k.device() == r.device(), "SharingTree: ", node, " k is ",
           dtype_name(k.dtype()), " on ", device_name(k.device()), ", expected ", dtype_name(r.dtype()),
           " on ", device_name(r.device()), " (as ", reference.name, ")");
}

// The first defined K/V tensor, which fixes Hkv and d for the whole tree.
const Tensor* first_kv(const SharingTree& tree) {
  if (!tree.segments.empty()) return &tree.segments.front().k;
  if (!tree.sequences.empty()) return &tree.sequences.front().k;
  return nullptr;
}

}  // namespace

void SharingTree::validate() const {
  const int n = static_cast<int>(segments.size());
  for (int i = 0; i < n; ++i) {
    const int parent = segments[i].parent;
    HG_CHECK(parent == kNoParent || (parent >= 0 && parent < n), "SharingTree: segment ", i,
             " has parent ", parent, ", outside the tree's segments [0, ", n, ") (orphan; use kNoParent=",
             kNoParent, " for a root)");
  }
  // Following parents from any segment must reach a root within n steps; otherwise the walk
  // is stuck on a cycle, which we print.
  for (int i = 0; i < n; ++i) {
    int node = i;
    for (int steps = 0; node != kNoParent && steps <= n; ++steps) node = segments[node].parent;
    if (node == kNoParent) continue;
    std::string cycle = std::to_string(node);
    for (int m = segments[node].parent; m != node; m = segments[m].parent) cycle += " -> " + std::to_string(m);
    fail("SharingTree: segment ", i, " does not reach a root: its parents form the cycle ", cycle, " -> ", node,
         " (expected a forest: every chain of parents ends at kNoParent)");
  }
  for (std::size_t s = 0; s < sequences.size(); ++s) {
    const int parent = sequences[s].parent;
    HG_CHECK(parent == kNoParent || (parent >= 0 && parent < n), "SharingTree: sequence ", s,
             " hangs under segment ", parent, ", outside the tree's segments [0, ", n,
             ") (use kNoParent=", kNoParent, " for a sequence without a shared prefix)");
    HG_CHECK(sequences[s].query_tokens >= 1, "SharingTree: sequence ", s, " has query_tokens=",
             sequences[s].query_tokens, ", expected >= 1");
  }
  KvReference reference;
  for (int i = 0; i < n; ++i)
    check_kv_pair(segments[i].k, segments[i].v, "segment " + std::to_string(i), reference);
  for (std::size_t s = 0; s < sequences.size(); ++s)
    check_kv_pair(sequences[s].k, sequences[s].v, "sequence " + std::to_string(s) + " suffix", reference);
}

std::int64_t SharingTree::kv_heads() const {
  const Tensor* kv = first_kv(*this);
  return kv ? kv->size(1) : 0;
}

std::int64_t SharingTree::head_dim() const {
  const Tensor* kv = first_kv(*this);
  return kv ? kv->size(2) : 0;
}

std::int64_t SharingTree::query_rows() const {
  std::int64_t rows = 0;
  for (const auto& s : sequences) rows += s.query_tokens;
  return rows;
}

std::vector<int> SharingTree::path(int sequence) const {
  HG_CHECK(sequence >= 0 && sequence < static_cast<int>(sequences.size()), "SharingTree::path: sequence ",
           sequence, " outside [0, ", sequences.size(), ")");
  std::vector<int> nodes;
  for (int node = sequences[sequence].parent; node != kNoParent; node = segments[node].parent) {
    HG_CHECK(nodes.size() < segments.size(), "SharingTree::path: sequence ", sequence,
             " sits under a cycle; call validate() first");
    nodes.push_back(node);
  }
  return {nodes.rbegin(), nodes.rend()};
}

std::int64_t SharingTree::context_tokens(int sequence) const {
  std::int64_t tokens = 0;
  for (int node : path(sequence)) tokens += segments[node].k.size(0);
  return tokens + sequences[sequence].k.size(0);
}

}  // namespace hydragen
