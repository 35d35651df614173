#include "attention_workload.h"

#include "core/thread_pool.h"

namespace hydragen::bench {

namespace {

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Every element depends only on (seed, stream, index), so threads do not change the data.
Tensor random_tensor(std::vector<std::int64_t> shape, DType dtype, std::uint64_t seed,
                     std::uint64_t stream) {
  Tensor t = Tensor::empty(std::move(shape), DType::f32);
  float* data = t.data<float>();
  const std::int64_t n = t.numel();
  constexpr std::int64_t kBlock = 1 << 16;
  const std::uint64_t base = splitmix64(seed ^ splitmix64(stream));
  ThreadPool::global().parallel_for((n + kBlock - 1) / kBlock, [&](std::int64_t block) {
    const std::int64_t end = std::min(n, (block + 1) * kBlock);
    for (std::int64_t i = block * kBlock; i < end; ++i) {
      const std::uint64_t bits = splitmix64(base + static_cast<std::uint64_t>(i));
      data[i] = static_cast<float>(bits >> 40) * (2.0f / 16777216.0f) - 1.0f;
    }
  });
  return dtype == DType::f32 ? t : t.to(dtype);
}

// The tokens of `parts` one after another: [sum of lengths, Hkv, d].
Tensor concat_tokens(const std::vector<const Tensor*>& parts, const Tensor& like) {
  std::int64_t total = 0;
  for (const Tensor* part : parts) total += part->size(0);
  Tensor out = Tensor::empty({total, like.size(1), like.size(2)}, like.dtype());
  std::int64_t offset = 0;
  for (const Tensor* part : parts) {
    if (part->size(0) == 0) continue;
    out.slice(0, offset, offset + part->size(0)).copy_from(*part);
    offset += part->size(0);
  }
  return out;
}

int group_of(const AttentionPoint& p, std::int64_t sequence) {
  return p.groups == 0 ? -1 : static_cast<int>(sequence / (p.batch / p.groups));
}

}  // namespace

AttentionWorkload make_workload(const AttentionPoint& p, DType dtype, std::uint64_t seed) {
  AttentionWorkload w;
  std::uint64_t stream = 0;
  auto kv = [&](std::int64_t tokens) {
    return random_tensor({tokens, p.kv_heads, p.head_dim}, dtype, seed, stream++);
  };
  w.prefix_k = kv(p.prefix);
  w.prefix_v = kv(p.prefix);
  for (std::int64_t g = 0; g < p.groups; ++g) {
    w.level2_k.push_back(kv(p.level2));
    w.level2_v.push_back(kv(p.level2));
  }
  for (std::int64_t b = 0; b < p.batch; ++b) {
    w.suffix_k.push_back(kv(p.suffix));
    w.suffix_v.push_back(kv(p.suffix));
  }
  w.q = random_tensor({p.batch * p.query_tokens, p.heads, p.head_dim}, dtype, seed, stream++);
  return w;
}

SharingTree make_tree(const AttentionWorkload& w, const AttentionPoint& p, const std::string& mode) {
  SharingTree tree;
  tree.sequences.resize(p.batch);
  const bool dense = mode == "dense";
  const bool share_level2 = mode == "hydragen" || mode == "paged";
  if (!dense) {
    tree.segments.push_back({kNoParent, w.prefix_k, w.prefix_v});
    if (share_level2) {
      for (std::int64_t g = 0; g < p.groups; ++g) {
        tree.segments.push_back({0, w.level2_k[g], w.level2_v[g]});
      }
    }
  }
  // Copies for dense and hydragen-root are made in parallel: they can be gigabytes.
  ThreadPool::global().parallel_for(p.batch, [&](std::int64_t b) {
    Sequence& s = tree.sequences[b];
    s.query_tokens = p.query_tokens;
    const int g = group_of(p, b);
    std::vector<const Tensor*> k_parts, v_parts;
    if (dense) {
      k_parts.push_back(&w.prefix_k);
      v_parts.push_back(&w.prefix_v);
    }
    if (g >= 0 && !share_level2) {
      k_parts.push_back(&w.level2_k[g]);
      v_parts.push_back(&w.level2_v[g]);
    }
    s.parent = dense ? kNoParent : (g >= 0 && share_level2 ? 1 + g : 0);
    if (k_parts.empty()) {
      s.k = w.suffix_k[b];
      s.v = w.suffix_v[b];
      return;
    }
    k_parts.push_back(&w.suffix_k[b]);
    v_parts.push_back(&w.suffix_v[b]);
    s.k = concat_tokens(k_parts, w.prefix_k);
    s.v = concat_tokens(v_parts, w.prefix_v);
  });
  tree.validate();
  return tree;
}

}  // namespace hydragen::bench
