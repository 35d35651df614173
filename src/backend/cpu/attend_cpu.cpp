// attend() on the CPU: T query rows against one K/V run, tiles over (kv head, query rows).
#include <numeric>
#include <vector>

#include "backend/cpu/cpu_attention.h"
#include "backend/cpu/head_tile.h"
#include "backend/cpu/state_merge.h"
#include "core/thread_pool.h"

namespace hydragen::cpu {

AttentionState attend(const Tensor& q, const Tensor& k, const Tensor& v, float scale, bool causal) {
  const std::int64_t tokens = q.size(0), heads = q.size(1), d = q.size(2);
  const std::int64_t kv_heads = k.size(1), group = heads / kv_heads;
  const KvRowsF32 keys = kv_rows_f32(k), values = kv_rows_f32(v);
  AttentionState out = poisoned_state(tokens, heads, d);
  std::vector<std::int64_t> query_rows(tokens);
  std::iota(query_rows.begin(), query_rows.end(), 0);
  const std::int64_t tile_tokens =
      choose_tile_tokens(std::span(&tokens, 1), kv_heads, group, ThreadPool::global().workers());
  const std::int64_t tiles_per_head = (tokens + tile_tokens - 1) / tile_tokens;
  ThreadPool::global().parallel_for(kv_heads * tiles_per_head, [&](std::int64_t n) {
    const std::int64_t first = (n % tiles_per_head) * tile_tokens;
    const HeadTileRows rows{std::span(query_rows).subspan(first, std::min(tile_tokens, tokens - first)),
                            n / tiles_per_head, group};
    OnlineSoftmaxTile tile(rows.size(), d);
    load_queries(q, rows, scale, tile);
    const std::vector<std::int64_t> mask =
        causal && tokens > 1 ? causal_visible_keys(rows, 0, tokens, keys.tokens) : std::vector<std::int64_t>{};
    attend_run(tile, rows, keys, values, mask.empty() ? nullptr : mask.data());
    tile.finish();
    store_state(tile, rows, out);
  });
  return out;
}

}  // namespace hydragen::cpu
