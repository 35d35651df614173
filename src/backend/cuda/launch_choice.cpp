// The CUDA attention step's kernel choice and plan options. See launch_choice.h.
#include "backend/cuda/launch_choice.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "hydragen/error.h"

namespace hydragen::cuda {

KernelOverrides parse_kernel_overrides(const char* shared_kernel, const char* pdl) {
  KernelOverrides o;
  const std::string shared = shared_kernel != nullptr ? shared_kernel : "";
  if (shared == "mma") o.shared = SharedKernel::mma;
  else if (shared == "wgmma") o.shared = SharedKernel::wgmma;
  else if (shared == "ws") o.shared = SharedKernel::warp_specialized;
  else HG_CHECK(shared.empty() || shared == "auto", "HYDRAGEN_SHARED_KERNEL=", shared, ": expected auto, mma, wgmma or ws");
  const std::string force = pdl != nullptr ? pdl : "";
  HG_CHECK(force.empty() || force == "0" || force == "1", "HYDRAGEN_PDL=", force, ": expected 0 or 1 (or unset)");
  if (!force.empty()) o.pdl = force == "1" ? Force::on : Force::off;
  return o;
}

KernelOverrides kernel_overrides_from_environment() {
  return parse_kernel_overrides(std::getenv("HYDRAGEN_SHARED_KERNEL"), std::getenv("HYDRAGEN_PDL"));
}

int DeviceKernels::blocks_per_sm(SharedKernel kernel) const {
  switch (kernel) {
    case SharedKernel::mma: return mma_blocks_per_sm;
    case SharedKernel::wgmma: return wgmma_blocks_per_sm;
    case SharedKernel::warp_specialized: return ws_blocks_per_sm;
  }
  return 0;
}

PlanSummary PlanSummary::of(const plan::AttentionPlan& plan) {
  PlanSummary s;
  s.shared_items = static_cast<std::int64_t>(plan.shared_items.size());
  s.shared_full_tiles = plan.shared_full_tiles;
  s.suffix_items = static_cast<std::int64_t>(plan.suffix_items.size());
  s.groups = static_cast<std::int64_t>(plan.groups.size());
  for (const plan::PlanItem& it : plan.suffix_items) {
    s.suffix_pieces += it.piece_count;
    for (int i = 0; i < it.piece_count; ++i)
      s.suffix_keys += plan.pieces[static_cast<std::size_t>(it.piece_begin + i)].tokens;
    s.max_rows = std::max(s.max_rows, it.row_count);
    s.min_rows = s.min_rows == 0 ? it.row_count : std::min(s.min_rows, it.row_count);
    s.one_row &= it.row_count == 1;
    s.lone_rows &= it.row_count == 1 && plan.groups[static_cast<std::size_t>(it.group)].items == 1;
  }
  s.split_rows = static_cast<std::int64_t>(plan.merge_rows.size());
  for (const plan::PlanMergeRow& mr : plan.merge_rows) s.split_multi_row |= mr.row > 0;
  s.max_columns = plan.max_columns;
  return s;
}

int LaunchChoice::key() const {
  return static_cast<int>(shared) | static_cast<int>(suffix) << 2 | static_cast<int>(decode_build) << 3 |
         merge_launch << 7 | suffix_after_shared << 8 | merge_after_decode << 9 | shared_after_previous << 10;
}

SharedKernel device_shared_kernel(const DeviceKernels& device, const KernelOverrides& overrides) {
  if (!overrides.shared) return device.wgmma_blocks_per_sm > 0 ? SharedKernel::wgmma : SharedKernel::mma;
  const SharedKernel forced = *overrides.shared;
  HG_CHECK(device.blocks_per_sm(forced) > 0, "HYDRAGEN_SHARED_KERNEL=", forced == SharedKernel::wgmma ? "wgmma" : "ws",
           ": this build or device has no sm_90a code for it (or the head dim is not 128)");
  return forced;
}

bool quad_rule(const PlanSummary& plan) {
  if (plan.suffix_items == 0 || !plan.lone_rows) return false;
  return plan.suffix_keys <= kQuadShortMeanKeys * plan.suffix_items ||
         (plan.suffix_items >= kQuadManyItems && plan.suffix_keys <= kQuadMaxMeanKeys * plan.suffix_items);
}

namespace {

// The one-path build the plan's rows fit, else general (min_rows is 0 without items).
DecodeBuild wide_build(const PlanSummary& plan) {
  if (plan.min_rows >= 3 && plan.max_rows <= 4) return DecodeBuild::four;
  if (plan.min_rows >= 5 && plan.max_rows <= 8) return DecodeBuild::eight;
  return DecodeBuild::general;
}

bool fits(DecodeBuild build, const PlanSummary& plan) {
  switch (build) {
    case DecodeBuild::general: return true;
    case DecodeBuild::narrow: return plan.one_row;
    case DecodeBuild::four:
    case DecodeBuild::eight: return wide_build(plan) == build;
  }
  return false;
}

}  // namespace

DecodeBuild decode_build_rule(const PlanSummary& plan) {
  if (plan.one_row && (plan.suffix_items <= kNarrowMostItems || plan.suffix_pieces <= 2 * plan.suffix_items))
    return DecodeBuild::narrow;
  return wide_build(plan);
}

bool merge_launch_rule(const PlanSummary& plan) {
  return plan.split_rows > 0 && plan.split_multi_row &&
         (plan.shared_items == 0 || plan.max_columns >= kMergeLaunchMinColumnsStacked);
}

bool pdl_rule(std::int64_t shared_items, int blocks_per_sm, int sms) {
  if (shared_items == 0 || blocks_per_sm <= 0) return false;
  const std::int64_t busy = (shared_items + blocks_per_sm - 1) / blocks_per_sm;
  return 2 * busy <= sms;
}

LaunchChoice choose_launch(const PlanSummary& plan, const DeviceKernels& device, const KernelOverrides& overrides) {
  LaunchChoice c;
  c.shared = device_shared_kernel(device, overrides);
  if (c.shared == SharedKernel::wgmma && !overrides.shared && device.ws_blocks_per_sm > 0 && plan.shared_full_tiles)
    c.shared = SharedKernel::warp_specialized;

  const bool quad = overrides.suffix ? *overrides.suffix == SuffixKernel::quad && plan.suffix_items > 0 && plan.lone_rows
                                     : quad_rule(plan);
  c.suffix = quad ? SuffixKernel::quad : SuffixKernel::decode;
  if (c.suffix == SuffixKernel::decode) {
    const bool forced = overrides.decode_build && fits(*overrides.decode_build, plan);
    c.decode_build = forced ? *overrides.decode_build : decode_build_rule(plan);
    c.merge_launch = overrides.merge_launch == Force::by_rule ? merge_launch_rule(plan)
                                                              : overrides.merge_launch == Force::on && plan.split_rows > 0;
  }

  const bool pdl = device.pdl && overrides.pdl != Force::off;
  c.suffix_after_shared =
      pdl && (overrides.pdl == Force::on || pdl_rule(plan.shared_items, device.blocks_per_sm(c.shared), device.sms));
  c.merge_after_decode = pdl && c.merge_launch;
  c.shared_after_previous = pdl && c.shared == SharedKernel::warp_specialized;
  return c;
}

plan::PlanOptions plan_options_for(const DeviceKernels& device, AttentionMode mode, bool causal,
                                   const KernelOverrides& overrides) {
  const SharedKernel shared = device_shared_kernel(device, overrides);
  plan::PlanOptions options;
  options.mode = mode;
  options.causal = causal;
  // The wgmma kernels' plans split shared work past one wave too ("v5").
  options.shared_split_past_one_wave = shared != SharedKernel::mma;
  options.shared_slots = device.sms * device.blocks_per_sm(shared);
  // By rule, full-tile plans are split for the warp-specialized kernel's slots ("v13"), a
  // stacked segment's heads differently where that fills its rounds ("v19").
  const bool full_tiles = shared == SharedKernel::wgmma && !overrides.shared && device.ws_blocks_per_sm > 0;
  options.shared_full_tile_slots = full_tiles ? device.sms * device.ws_blocks_per_sm : 0;
  options.shared_head_splits = full_tiles;
  options.suffix_slots = device.sms * device.decode_blocks_per_sm * kDecodeItemsPerBlock;
  options.suffix_tile_rows = plan::kSuffixTileRowsByRule;  // one-row GQA decode items by rule ("e8")
  return options;
}

}  // namespace hydragen::cuda
