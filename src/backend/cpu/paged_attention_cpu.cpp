// An attention plan run on the CPU. See paged_attention_cpu.h.
//
// Per item (a kv head, <= 128 query rows, a list of pieces): the item's keys, in runs of
// consecutive pool slots, are fed where they lie to one OnlineSoftmaxTile that holds all of the
// item's rows (two sgemm per block of keys: a K/V row is read once for the whole tile). Pieces
// are in context order, so the keys a row may see (position < key_limit, the causal mask) are
// a prefix of each run. The item's (o, lse)
// goes to its column of the partial states; then each merge group merges its rows' columns
// with merge_state_rows, the rule of merge_states_chunk on the device. Shared and suffix items
// run in one parallel loop: on the CPU nothing orders them before the merges.
#include "backend/cpu/paged_attention_cpu.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "backend/cpu/online_softmax.h"
#include "backend/cpu/state_merge.h"
#include "core/thread_pool.h"
#include "hydragen/error.h"

namespace hydragen::cpu {
namespace {

using plan::AttentionPlan;
using plan::PlanItem;
using plan::PlanPiece;
using plan::PlanRow;

std::string describe(const Tensor& t) {
  if (!t.defined()) return "nothing";
  return concat(t.shape_str(), " ", dtype_name(t.dtype()), " on ", device_name(t.device()),
                t.is_contiguous() ? "" : " (strided)");
}

void check_f32(const char* name, const Tensor& t, int rank, const std::string& expected) {
  HG_CHECK(t.defined() && t.device() == Device::cpu && t.dtype() == DType::f32 && t.is_contiguous() &&
               t.rank() == rank,
           "run_attention_plan: ", name, " must be a contiguous f32 CPU tensor ", expected, ", got ", describe(t));
}

// The sizes every index of the plan is checked against.
struct Dims {
  std::int64_t query_rows, q_heads, kv_heads, group, head_dim, pool_pages, page_size;
};

// Every index the items and merges follow stays inside the plan's arrays and the tensors, and
// every merge group has as many items as it says, all on the same rows (the device's ticket
// counts on that).
void check_plan(const AttentionPlan& plan, const Dims& d, std::vector<std::int32_t>& group_item) {
  const auto pages = static_cast<std::int64_t>(plan.pages.size());
  for (std::int64_t i = 0; i < pages; ++i)
    HG_CHECK(plan.pages[i] >= 0 && plan.pages[i] < d.pool_pages, "run_attention_plan: plan.pages[", i, "] is ",
             plan.pages[i], ", k_pool has ", d.pool_pages, " pages");
  for (std::size_t i = 0; i < plan.pieces.size(); ++i) {
    const PlanPiece& pc = plan.pieces[i];
    HG_CHECK(pc.tokens >= 1 && pc.tokens <= plan::kBlockTokens && pc.token_begin >= 0 && pc.page_offset >= 0 &&
                 pc.page_offset + (std::int64_t{pc.token_begin} + pc.tokens - 1) / d.page_size < pages,
             "run_attention_plan: plan.pieces[", i, "] (page_offset ", pc.page_offset, ", token_begin ",
             pc.token_begin, ", tokens ", pc.tokens, ") leaves plan.pages (", pages, " ids of ", d.page_size,
             "-token pages)");
    // The slot the suffix kernels read keys from: the page list's, where the piece is in one page.
    const std::int64_t slot =
        plan::piece_pool_slot(plan.pages, static_cast<int>(d.page_size), pc.page_offset, pc.token_begin, pc.tokens);
    HG_CHECK(pc.slot == slot, "run_attention_plan: plan.pieces[", i, "] has slot ", pc.slot, ", its page list gives ",
             slot, slot < 0 ? " (the piece spans pages)" : "");
  }
  for (std::size_t i = 0; i < plan.rows.size(); ++i) {
    const PlanRow& row = plan.rows[i];
    HG_CHECK(row.token >= 0 && row.token < d.query_rows && row.group >= 0 && row.group < d.group &&
                 row.state_base >= 0 && row.state_stride >= 0,
             "run_attention_plan: plan.rows[", i, "] (token ", row.token, ", group ", row.group,
             ") does not fit q [", d.query_rows, ", ", d.q_heads, ", d] with ", d.kv_heads, " kv heads");
  }
  auto entry_ok = [&](const PlanRow& row, std::int64_t column, std::int64_t kv_head) {
    const std::int64_t e = row.state_base + column * row.state_stride + kv_head * d.group + row.group;
    return e >= 0 && e < plan.state_entries;
  };
  auto check_items = [&](const std::vector<PlanItem>& items, const char* list, bool suffix) {
    for (std::size_t i = 0; i < items.size(); ++i) {
      const PlanItem& it = items[i];
      HG_CHECK(it.kv_head >= 0 && it.kv_head < d.kv_heads && it.piece_begin >= 0 && it.piece_count >= 0 &&
                   std::int64_t{it.piece_begin} + it.piece_count <= static_cast<std::int64_t>(plan.pieces.size()) &&
                   it.row_begin >= 0 && it.row_count >= 0 &&
                   std::int64_t{it.row_begin} + it.row_count <= static_cast<std::int64_t>(plan.rows.size()) &&
                   it.column >= 0 &&
                   (suffix ? it.group >= 0 && it.group < static_cast<std::int64_t>(plan.groups.size()) : it.group == -1),
               "run_attention_plan: plan.", list, "[", i, "] (kv head ", it.kv_head, ", pieces ", it.piece_begin, "+",
               it.piece_count, ", rows ", it.row_begin, "+", it.row_count, ", group ", it.group,
               ") leaves the plan or the ", d.kv_heads, " kv heads");
      for (int r = 0; r < it.row_count; ++r)
        HG_CHECK(entry_ok(plan.rows[it.row_begin + r], it.column, it.kv_head), "run_attention_plan: plan.", list, "[",
                 i, "] writes a partial state past plan.state_entries (", plan.state_entries, ")");
    }
  };
  check_items(plan.shared_items, "shared_items", false);
  // The shared kernel finds an item's blocks without masked keys from its first and last piece
  // (shared_attention_ws.cuh, v34): every piece but the last holds kBlockTokens keys, and each
  // starts where the one before it ended.
  for (std::size_t i = 0; i < plan.shared_items.size(); ++i) {
    const PlanItem& it = plan.shared_items[i];
    for (int k = 0; k + 1 < it.piece_count; ++k) {
      const PlanPiece& a = plan.pieces[it.piece_begin + k];
      const PlanPiece& b = plan.pieces[it.piece_begin + k + 1];
      HG_CHECK(a.tokens == plan::kBlockTokens && b.position == a.position + a.tokens,
               "run_attention_plan: plan.shared_items[", i, "]'s piece ", k, " (", a.tokens, " keys at position ",
               a.position, ") is not a whole block followed by the next position (", b.position, ")");
    }
  }
  check_items(plan.suffix_items, "suffix_items", true);
  group_item.assign(plan.groups.size(), -1);
  std::vector<std::int32_t> count(plan.groups.size(), 0);
  for (std::size_t i = 0; i < plan.suffix_items.size(); ++i) {
    const PlanItem& it = plan.suffix_items[i];
    std::int32_t& first = group_item[it.group];
    if (first < 0) first = static_cast<std::int32_t>(i);
    const PlanItem& f = plan.suffix_items[first];
    HG_CHECK(it.kv_head == f.kv_head && it.row_begin == f.row_begin && it.row_count == f.row_count,
             "run_attention_plan: plan.suffix_items[", i, "] and [", first, "] of merge group ", it.group,
             " cover different rows");
    ++count[it.group];
  }
  for (std::size_t g = 0; g < plan.groups.size(); ++g) {
    const plan::PlanMergeGroup& group = plan.groups[g];
    HG_CHECK(group.items >= 1 && count[g] == group.items && group.columns >= 1, "run_attention_plan: plan.groups[",
             g, "] says ", group.items, " items and ", group.columns, " columns, the plan has ", count[g],
             " suffix items in it");
    const PlanItem& it = plan.suffix_items[group_item[g]];
    for (int r = 0; r < it.row_count; ++r)
      HG_CHECK(entry_ok(plan.rows[it.row_begin + r], group.columns - 1, it.kv_head), "run_attention_plan: plan.groups[",
               g, "] merges partial states past plan.state_entries (", plan.state_entries, ")");
  }
  // The merge launch's rows (CUDA): each row of each split group once, from the group's first
  // item, and nothing else.
  std::vector<std::int32_t> merged(plan.groups.size(), 0);
  for (std::size_t i = 0; i < plan.merge_rows.size(); ++i) {
    const plan::PlanMergeRow& mr = plan.merge_rows[i];
    const bool item_ok = mr.item >= 0 && mr.item < static_cast<std::int64_t>(plan.suffix_items.size());
    const int g = item_ok ? plan.suffix_items[mr.item].group : -1;
    HG_CHECK(item_ok && group_item[g] == mr.item && plan.groups[g].items > 1 && mr.row == merged[g] &&
                 mr.row < plan.suffix_items[mr.item].row_count,
             "run_attention_plan: plan.merge_rows[", i, "] (item ", mr.item, ", row ", mr.row,
             ") is not the next row of a split merge group's first item");
    ++merged[g];
  }
  for (std::size_t g = 0; g < plan.groups.size(); ++g) {
    const int rows = plan.groups[g].items > 1 ? plan.suffix_items[group_item[g]].row_count : 0;
    HG_CHECK(merged[g] == rows, "run_attention_plan: plan.merge_rows holds ", merged[g], " rows of plan.groups[", g,
             "], which has ", plan.groups[g].items, " items of ", rows, " rows to merge");
  }
}

// Partial states: entry e holds o[e * D, e * D + D) and lse[e] (the device's StateBuffer).
struct States {
  std::vector<float> o, lse;
};

// One item's rows against its pieces; writes its column of the partial states.
void run_item(const AttentionPlan& plan, const PlanItem& it, const Dims& d, const float* q, const float* k_pool,
              const float* v_pool, float scale, States& states) {
  const std::int64_t dim = d.head_dim;
  OnlineSoftmaxTile tile(it.row_count, dim);
  for (int r = 0; r < it.row_count; ++r) {
    const PlanRow& row = plan.rows[it.row_begin + r];
    const float* src = q + (std::int64_t{row.token} * d.q_heads + it.kv_head * d.group + row.group) * dim;
    float* dst = tile.query(r);
    for (std::int64_t c = 0; c < dim; ++c) dst[c] = scale * src[c];
  }
  // The keys are read where they lie: a span is a run of consecutive pool slots at consecutive
  // context positions (a page's share of a piece at least), fed to the tile in place, its token
  // rows Hkv x D floats apart. The causal mask is then a prefix of each span.
  const std::int64_t token_elems = d.kv_heads * dim;
  std::vector<std::int64_t> visible(it.row_count);
  std::int64_t span_slot = 0, span_position = 0, span_keys = 0;
  auto flush = [&] {
    if (span_keys == 0) return;
    for (int r = 0; r < it.row_count; ++r)
      visible[r] = std::clamp<std::int64_t>(plan.rows[it.row_begin + r].key_limit - span_position, 0, span_keys);
    const std::int64_t at = span_slot * token_elems + it.kv_head * dim;
    tile.attend(k_pool + at, token_elems, v_pool + at, token_elems, span_keys, visible.data());
    span_keys = 0;
  };
  // Keys [slot, slot + n) at positions [position, position + n): onto the span, or a new one.
  auto add = [&](std::int64_t slot, std::int64_t position, std::int64_t n) {
    if (span_keys > 0 && slot == span_slot + span_keys && position == span_position + span_keys) {
      span_keys += n;
      return;
    }
    flush();
    span_slot = slot, span_position = position, span_keys = n;
  };
  for (int pi = 0; pi < it.piece_count; ++pi) {
    const PlanPiece& pc = plan.pieces[it.piece_begin + pi];
    // As the suffix kernels: from the piece's slot where it is in one page (checked above).
    if (pc.slot >= 0) {
      add(pc.slot, pc.position, pc.tokens);
      continue;
    }
    for (int j = 0; j < pc.tokens; ++j) {
      const std::int64_t tok = pc.token_begin + j;
      add(std::int64_t{plan.pages[pc.page_offset + tok / d.page_size]} * d.page_size + tok % d.page_size,
          pc.position + j, 1);
    }
  }
  flush();
  tile.finish();
  for (int r = 0; r < it.row_count; ++r) {
    const PlanRow& row = plan.rows[it.row_begin + r];
    const std::int64_t e = row.state_base + std::int64_t{it.column} * row.state_stride + it.kv_head * d.group + row.group;
    std::memcpy(states.o.data() + e * dim, tile.output(r), dim * sizeof(float));
    states.lse[e] = tile.lse(r);
  }
}

}  // namespace

plan::PlanOptions plan_options(AttentionMode mode, bool causal) {
  plan::PlanOptions options;
  options.mode = mode;
  options.causal = causal;
  // The items run on the thread pool: split-KV only fills its workers (the defaults are the H200's SMs).
  options.shared_slots = options.suffix_slots = ThreadPool::global().workers();
  return options;
}

void run_attention_plan(const AttentionPlan& plan, const Tensor& q, const Tensor& k_pool, const Tensor& v_pool,
                        Tensor& out, Tensor* out_lse, float scale) {
  check_f32("q", q, 3, "[query_rows, Hq, D]");
  check_f32("k_pool", k_pool, 4, "[pages, page_size, Hkv, D]");
  const Dims d{q.size(0), q.size(1), k_pool.size(2), 0, q.size(2), k_pool.size(0), k_pool.size(1)};
  HG_CHECK(q.size(0) == plan.query_rows, "run_attention_plan: q has ", q.size(0), " rows, the plan has ",
           plan.query_rows, " query rows");
  HG_CHECK(k_pool.size(3) == d.head_dim && d.kv_heads > 0 && d.q_heads % d.kv_heads == 0 && d.page_size > 0,
           "run_attention_plan: k_pool ", k_pool.shape_str(), " does not fit q ", q.shape_str(),
           ", expected [pages, page_size, Hkv, ", d.head_dim, "] with Hq a multiple of Hkv");
  check_f32("v_pool", v_pool, 4, concat("of k_pool's shape ", k_pool.shape_str()));
  HG_CHECK(v_pool.shape() == k_pool.shape(), "run_attention_plan: v_pool has shape ", v_pool.shape_str(),
           ", expected k_pool's ", k_pool.shape_str());
  check_f32("out", out, 3, concat("of q's shape ", q.shape_str()));
  HG_CHECK(out.shape() == q.shape(), "run_attention_plan: out has shape ", out.shape_str(), ", expected q's ",
           q.shape_str());
  if (out_lse != nullptr) {
    const std::string lse_shape = concat("[", d.query_rows, ", ", d.q_heads, "]");
    check_f32("out_lse", *out_lse, 2, lse_shape);
    HG_CHECK(out_lse->size(0) == d.query_rows && out_lse->size(1) == d.q_heads, "run_attention_plan: out_lse has shape ",
             out_lse->shape_str(), ", expected ", lse_shape);
  }
  HG_CHECK(std::isfinite(scale) && scale >= 0, "run_attention_plan: scale must be >= 0 (0: 1/sqrt(D)), got ", scale);
  Dims dims = d;
  dims.group = d.q_heads / d.kv_heads;
  std::vector<std::int32_t> group_item;
  check_plan(plan, dims, group_item);
  if (d.head_dim == 0) return;
  const float softmax_scale = scale > 0 ? scale : 1.f / std::sqrt(static_cast<float>(d.head_dim));

  // NaN until written: a plan that merges a state no item wrote shows up as NaN.
  States states;
  states.o.assign(plan.state_entries * d.head_dim, std::numeric_limits<float>::quiet_NaN());
  states.lse.assign(plan.state_entries, std::numeric_limits<float>::quiet_NaN());
  const auto shared = static_cast<std::int64_t>(plan.shared_items.size());
  const auto items = shared + static_cast<std::int64_t>(plan.suffix_items.size());
  ThreadPool::global().parallel_for(items, [&](std::int64_t i) {
    const PlanItem& it = i < shared ? plan.shared_items[i] : plan.suffix_items[i - shared];
    run_item(plan, it, dims, q.data<float>(), k_pool.data<float>(), v_pool.data<float>(), softmax_scale, states);
  });

  // Merges, in chunks of groups (one is a few rows: too little to hand out alone).
  constexpr std::int64_t kGroupsPerTask = 64;
  const auto groups = static_cast<std::int64_t>(plan.groups.size());
  ThreadPool::global().parallel_for((groups + kGroupsPerTask - 1) / kGroupsPerTask, [&](std::int64_t chunk) {
    std::vector<const float*> o_in;
    std::vector<float> lse_in;
    for (std::int64_t g = chunk * kGroupsPerTask; g < std::min(groups, (chunk + 1) * kGroupsPerTask); ++g) {
      const PlanItem& it = plan.suffix_items[group_item[g]];
      const int columns = plan.groups[g].columns;
      o_in.resize(columns), lse_in.resize(columns);
      for (int r = 0; r < it.row_count; ++r) {
        const PlanRow& row = plan.rows[it.row_begin + r];
        const std::int64_t head = it.kv_head * dims.group + row.group;
        for (int c = 0; c < columns; ++c) {
          const std::int64_t e = row.state_base + std::int64_t{c} * row.state_stride + head;
          o_in[c] = states.o.data() + e * d.head_dim;
          lse_in[c] = states.lse[e];
        }
        const std::int64_t qi = std::int64_t{row.token} * d.q_heads + head;
        float lse = 0;
        merge_state_rows(o_in, lse_in, d.head_dim, out.data<float>() + qi * d.head_dim, &lse);
        if (out_lse != nullptr) out_lse->data<float>()[qi] = lse;
      }
    }
  });
}

}  // namespace hydragen::cpu
