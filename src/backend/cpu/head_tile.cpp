#include "backend/cpu/head_tile.h"

#include <algorithm>
#include <cmath>

namespace hydragen::cpu {

void load_queries(const Tensor& q, const HeadTileRows& rows, float scale, OnlineSoftmaxTile& tile) {
  for (std::int64_t i = 0; i < rows.size(); ++i) load_row(q, rows.query_row(i), rows.head(i), tile.query(i), scale);
}

std::vector<std::int64_t> causal_visible_keys(const HeadTileRows& rows, std::int64_t first_row,
                                              std::int64_t tokens, std::int64_t keys) {
  std::vector<std::int64_t> visible(rows.size());
  for (std::int64_t i = 0; i < rows.size(); ++i) visible[i] = keys - tokens + (rows.query_row(i) - first_row) + 1;
  return visible;
}

void attend_run(OnlineSoftmaxTile& tile, const HeadTileRows& rows, const KvRowsF32& k, const KvRowsF32& v,
                const std::int64_t* visible_keys) {
  tile.attend(k.head(rows.kv_head), k.token_stride, v.head(rows.kv_head), v.token_stride, k.tokens, visible_keys);
}

void store_state(const OnlineSoftmaxTile& tile, const HeadTileRows& rows, AttentionState& out) {
  const std::int64_t heads = out.heads(), d = out.head_dim();
  float* o = out.o.data<float>();
  float* lse = out.lse.data<float>();
  for (std::int64_t i = 0; i < rows.size(); ++i) {
    const std::int64_t at = rows.query_row(i) * heads + rows.head(i);
    std::copy_n(tile.output(i), d, o + at * d);
    lse[at] = tile.lse(i);
  }
}

std::int64_t choose_tile_tokens(std::span<const std::int64_t> tokens_per_run, std::int64_t kv_heads,
                                std::int64_t group, int workers) {
  auto tiles = [&](std::int64_t tile_tokens) {
    std::int64_t count = 0;
    for (std::int64_t tokens : tokens_per_run) count += (tokens + tile_tokens - 1) / tile_tokens;
    return count * kv_heads;
  };
  // Smaller tiles re-read the run's K/V once more each; only worth it to keep threads busy.
  const std::int64_t smallest = std::max<std::int64_t>(1, 16 / group);
  std::int64_t tile_tokens = std::max<std::int64_t>(1, kMaxTileRows / group);
  while (tile_tokens > smallest && tiles(tile_tokens) < 4 * workers) tile_tokens = std::max(smallest, tile_tokens / 2);
  return tile_tokens;
}

float softmax_scale(const std::optional<float>& scale, std::int64_t head_dim) {
  return scale ? *scale : static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
}

}  // namespace hydragen::cpu
