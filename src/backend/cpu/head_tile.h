// The unit of CPU attention work: a tile of query rows that read one kv head. Under GQA the
// G = Hq / Hkv query heads of a kv head share its keys, so they are stacked as rows too:
// tile row i is (query row query_rows[i / G], query head kv_head·G + i % G).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/cpu/kv_rows.h"
#include "backend/cpu/online_softmax.h"
#include "hydragen/attention.h"

namespace hydragen::cpu {

struct HeadTileRows {
  std::span<const std::int64_t> query_rows;
  std::int64_t kv_head = 0;
  std::int64_t group = 1;  // G

  std::int64_t size() const { return static_cast<std::int64_t>(query_rows.size()) * group; }
  std::int64_t query_row(std::int64_t i) const { return query_rows[i / group]; }
  std::int64_t head(std::int64_t i) const { return kv_head * group + i % group; }
};

// Fills the tile's queries from q [rows, Hq, d] (any float dtype), times the softmax scale.
void load_queries(const Tensor& q, const HeadTileRows& rows, float scale, OnlineSoftmaxTile& tile);

// The causal mask for a run of `keys` keys that ends where a sequence's queries end: the
// sequence's tokens are query rows [first_row, first_row + tokens), and token t sees the
// keys [0, keys − tokens + t]. One count per tile row.
std::vector<std::int64_t> causal_visible_keys(const HeadTileRows& rows, std::int64_t first_row,
                                              std::int64_t tokens, std::int64_t keys);

// Feeds kv head rows.kv_head of one K/V run to the tile.
void attend_run(OnlineSoftmaxTile& tile, const HeadTileRows& rows, const KvRowsF32& k, const KvRowsF32& v,
                const std::int64_t* visible_keys = nullptr);

// Copies the finished tile's rows into their places in `out`.
void store_state(const OnlineSoftmaxTile& tile, const HeadTileRows& rows, AttentionState& out);

// The number of query tokens per tile: as many as fit kMaxTileRows rows, fewer when the
// work would otherwise give each thread less than a few tiles. tokens_per_run[i] is how
// many query tokens read run i; every run is split across kv_heads.
std::int64_t choose_tile_tokens(std::span<const std::int64_t> tokens_per_run, std::int64_t kv_heads,
                                std::int64_t group, int workers);
inline constexpr std::int64_t kMaxTileRows = 128;

// 1/sqrt(d) unless given.
float softmax_scale(const std::optional<float>& scale, std::int64_t head_dim);

}  // namespace hydragen::cpu
