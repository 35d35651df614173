// Plan buffers, upload and the launches of a paged attention step. See paged_attention_runner.h;
// the kernels are in the translation units of kernel_table.h, the choice in launch_choice.cpp.
#include "backend/cuda/paged_attention_runner.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <span>

#include "backend/cuda/attention_params.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernel_table.h"

namespace hydragen::cuda {
namespace {

// Every kernel a runner may launch for one dtype and head dim.
struct KernelTable {
  KernelEntry mma, wgmma, ws;  // the shared launch (SharedKernel)
  DecodeEntries decode;
  KernelEntry quad, split_merge;
  const KernelEntry& shared(SharedKernel kernel) const {
    return kernel == SharedKernel::mma ? mma : kernel == SharedKernel::wgmma ? wgmma : ws;
  }
  const KernelEntry& decode_build(DecodeBuild build) const {
    switch (build) {
      case DecodeBuild::narrow: return decode.narrow;
      case DecodeBuild::four: return decode.four;
      case DecodeBuild::eight: return decode.eight;
      case DecodeBuild::general: break;
    }
    return decode.general;
  }
};

KernelTable kernel_table(DType dtype, int head_dim) {
  HG_CHECK(dtype == DType::bf16 || dtype == DType::f16, "paged attention: dtype must be bf16 or f16, got ",
           dtype_name(dtype));
  HG_CHECK(supported_head_dim(head_dim), "paged attention: head_dim ", head_dim,
           " is not supported on CUDA (supported: ", supported_head_dims(), ")");
  return {shared_mma_entry(dtype, head_dim), shared_wgmma_entry(dtype, head_dim), shared_ws_entry(dtype, head_dim),
          decode_entries(dtype, head_dim),   decode_quad_entry(dtype, head_dim),  split_merge_entry(dtype, head_dim)};
}

int current_device_attribute(cudaDeviceAttr attribute) {
  int device = 0, value = 0;
  HG_CUDA_CHECK(cudaGetDevice(&device));
  HG_CUDA_CHECK(cudaDeviceGetAttribute(&value, attribute, device));
  return value;
}

DeviceKernels device_kernels_of(const KernelTable& k) {
  DeviceKernels d;
  d.sms = current_device_attribute(cudaDevAttrMultiProcessorCount);
  d.pdl = current_device_attribute(cudaDevAttrComputeCapabilityMajor) >= 9;
  d.mma_blocks_per_sm = k.mma.blocks_per_sm;
  d.wgmma_blocks_per_sm = k.wgmma.blocks_per_sm;
  d.ws_blocks_per_sm = k.ws.blocks_per_sm;
  d.decode_blocks_per_sm = k.decode.general.blocks_per_sm;
  return d;
}

template <class E>
E* device_array(std::int64_t count) {
  void* p = nullptr;
  HG_CUDA_CHECK(cudaMalloc(&p, std::max<std::int64_t>(count, 1) * sizeof(E)));
  return static_cast<E*>(p);
}

// Where each plan array starts in the plan block (16-byte aligned, at capacity), in the order
// prepare packs them: the counts first, the arrays that grow with the batch last.
struct PlanBlockLayout {
  std::size_t counts = 0, pages = 0, pieces = 0, rows = 0, shared_items = 0, groups = 0, merge_rows = 0,
              suffix_items = 0, bytes = 0;
  static PlanBlockLayout of(const PlanCapacity& c) {
    PlanBlockLayout l;
    std::size_t at = 0;
    auto take = [&at](std::int64_t n, std::size_t size) {
      const std::size_t begin = at;
      at += (static_cast<std::size_t>(std::max<std::int64_t>(n, 1)) * size + 15) / 16 * 16;
      return begin;
    };
    l.counts = take(3, sizeof(std::int32_t));
    l.pages = take(c.pages, sizeof(std::int32_t));
    l.pieces = take(c.pieces, sizeof(plan::PlanPiece));
    l.rows = take(c.rows, sizeof(plan::PlanRow));
    l.shared_items = take(c.shared_items, sizeof(plan::PlanItem));
    l.groups = take(c.groups, sizeof(plan::PlanMergeGroup));
    l.merge_rows = take(c.merge_rows, sizeof(plan::PlanMergeRow));
    // Whole blocks of the suffix grids: the decode kernel loads an item before checking its
    // index against the count (load_suffix_item).
    static_assert(kSuffixItemsAlign % kDecodeItemsPerBlock == 0 && kSuffixItemsAlign % kQuadItemsPerBlock == 0);
    l.suffix_items = take((c.suffix_items + kSuffixItemsAlign - 1) / kSuffixItemsAlign * kSuffixItemsAlign,
                          sizeof(plan::PlanItem));
    l.bytes = at;
    return l;
  }
};

}  // namespace

bool supported_head_dim(int head_dim) { return head_dim == 64 || head_dim == 96 || head_dim == 128; }

const char* supported_head_dims() { return "64, 96, 128"; }

DeviceKernels device_kernels(DType dtype, int head_dim) { return device_kernels_of(kernel_table(dtype, head_dim)); }

plan::PlanOptions plan_options_for_device(DType dtype, int head_dim, AttentionMode mode, bool causal,
                                          const KernelOverrides& overrides) {
  return plan_options_for(device_kernels(dtype, head_dim), mode, causal, overrides);
}

PlanCapacity PlanCapacity::of(const plan::AttentionPlan& plan) {
  return {static_cast<std::int64_t>(plan.pages.size()), static_cast<std::int64_t>(plan.pieces.size()),
          static_cast<std::int64_t>(plan.rows.size()), static_cast<std::int64_t>(plan.shared_items.size()),
          static_cast<std::int64_t>(plan.suffix_items.size()), static_cast<std::int64_t>(plan.groups.size()),
          plan.state_entries, static_cast<std::int64_t>(plan.merge_rows.size())};
}

bool PlanCapacity::holds(const PlanCapacity& need) const {
  return need.pages <= pages && need.pieces <= pieces && need.rows <= rows && need.shared_items <= shared_items &&
         need.suffix_items <= suffix_items && need.groups <= groups && need.state_entries <= state_entries &&
         need.merge_rows <= merge_rows;
}

PlanCapacity PlanCapacity::max(const PlanCapacity& o) const {
  return {std::max(pages, o.pages), std::max(pieces, o.pieces), std::max(rows, o.rows),
          std::max(shared_items, o.shared_items), std::max(suffix_items, o.suffix_items),
          std::max(groups, o.groups), std::max(state_entries, o.state_entries), std::max(merge_rows, o.merge_rows)};
}

struct PagedAttentionRunner::Impl {
  int head_dim, q_heads, kv_heads;
  PlanCapacity capacity;
  KernelOverrides overrides;
  KernelTable kernels;
  DeviceKernels device;
  // Grids: persistent for the shared kernels (per kernel) and the merge launch (the counts are
  // read on the device, so the launch shape is fixed); whole for the decode kernels.
  int shared_grid[3] = {0, 0, 0};  // by SharedKernel
  int decode_grid = 0, quad_grid = 0, merge_grid = 0;
  LaunchChoice choice;  // the current plan's (made by prepare, applied by upload_prepared)
  // The plan's arrays, at capacity, in one device block laid out as each pinned staging
  // buffer is: prepare packs a plan into one, upload_prepared moves it with one copy. Two
  // buffers, used in turn, so a plan can be packed while the last one's copy is in flight.
  unsigned char* plan_block = nullptr;
  PlanBlockLayout layout;  // of plan_block (and of each staging buffer)
  struct Staging {
    unsigned char* host = nullptr;
    cudaEvent_t copied = nullptr;  // after its last copy (the buffer may be packed again)
    std::size_t bytes = 0;         // the copy's extent: up to the end of the last array
    LaunchChoice choice;
  } staging[2];
  int next_staging = 0;  // the buffer prepare packs next
  int prepared = -1;     // the buffer holding a prepared plan not yet uploaded, or -1
  std::int32_t* pages = nullptr;
  plan::PlanPiece* pieces = nullptr;
  plan::PlanRow* rows = nullptr;
  plan::PlanItem* shared_items = nullptr;
  plan::PlanItem* suffix_items = nullptr;
  plan::PlanMergeGroup* groups = nullptr;
  plan::PlanMergeRow* merge_rows = nullptr;
  std::int32_t* counts = nullptr;  // [shared items, suffix items, merge rows]
  std::int32_t* arrivals = nullptr;
  float* state_o = nullptr;
  float* state_lse = nullptr;
};

PagedAttentionRunner::PagedAttentionRunner(DType dtype, int head_dim, int q_heads, int kv_heads,
                                           const PlanCapacity& capacity, const KernelOverrides& overrides)
    : impl_(std::make_unique<Impl>()) {
  HG_CHECK(kv_heads > 0 && q_heads % kv_heads == 0, "PagedAttentionRunner: q_heads (", q_heads,
           ") must be a multiple of kv_heads (", kv_heads, ")");
  HG_CHECK(overrides.rescale_lag >= 0.f && overrides.rescale_lag <= kMaxRescaleLag,
           "PagedAttentionRunner: KernelOverrides::rescale_lag must be 0..", kMaxRescaleLag, ", got ",
           overrides.rescale_lag);
  Impl& m = *impl_;
  m.head_dim = head_dim, m.q_heads = q_heads, m.kv_heads = kv_heads, m.capacity = capacity;
  m.overrides = overrides;
  m.kernels = kernel_table(dtype, head_dim);
  m.device = device_kernels_of(m.kernels);
  device_shared_kernel(m.device, overrides);  // a forced kernel the device lacks throws here
  const std::int64_t sms = m.device.sms;
  for (const SharedKernel k : {SharedKernel::mma, SharedKernel::wgmma, SharedKernel::warp_specialized})
    m.shared_grid[static_cast<int>(k)] =
        static_cast<int>(std::min<std::int64_t>(capacity.shared_items, sms * m.kernels.shared(k).blocks_per_sm));
  m.decode_grid = static_cast<int>((capacity.suffix_items + kDecodeItemsPerBlock - 1) / kDecodeItemsPerBlock);
  m.quad_grid = static_cast<int>((capacity.suffix_items + kQuadItemsPerBlock - 1) / kQuadItemsPerBlock);
  m.merge_grid = static_cast<int>(
      std::min<std::int64_t>((capacity.merge_rows + kSplitMergeWarps - 1) / kSplitMergeWarps, sms * kSplitMergeBlocksPerSm));
  m.layout = PlanBlockLayout::of(capacity);
  const PlanBlockLayout& layout = m.layout;
  m.plan_block = device_array<unsigned char>(static_cast<std::int64_t>(layout.bytes));
  for (Impl::Staging& buffer : m.staging) {
    HG_CUDA_CHECK(cudaMallocHost(&buffer.host, layout.bytes));
    HG_CUDA_CHECK(cudaEventCreateWithFlags(&buffer.copied, cudaEventDisableTiming));
  }
  m.counts = reinterpret_cast<std::int32_t*>(m.plan_block + layout.counts);
  m.pages = reinterpret_cast<std::int32_t*>(m.plan_block + layout.pages);
  m.pieces = reinterpret_cast<plan::PlanPiece*>(m.plan_block + layout.pieces);
  m.rows = reinterpret_cast<plan::PlanRow*>(m.plan_block + layout.rows);
  m.shared_items = reinterpret_cast<plan::PlanItem*>(m.plan_block + layout.shared_items);
  m.groups = reinterpret_cast<plan::PlanMergeGroup*>(m.plan_block + layout.groups);
  m.merge_rows = reinterpret_cast<plan::PlanMergeRow*>(m.plan_block + layout.merge_rows);
  m.suffix_items = reinterpret_cast<plan::PlanItem*>(m.plan_block + layout.suffix_items);
  m.arrivals = device_array<std::int32_t>(capacity.groups);
  m.state_o = device_array<float>(capacity.state_entries * head_dim);
  m.state_lse = device_array<float>(capacity.state_entries);
  HG_CUDA_CHECK(cudaMemset(m.counts, 0, 3 * sizeof(std::int32_t)));
  HG_CUDA_CHECK(cudaMemset(m.arrivals, 0, std::max<std::int64_t>(capacity.groups, 1) * sizeof(std::int32_t)));
  m.choice = choose_launch(PlanSummary{}, m.device, overrides);
}

PagedAttentionRunner::~PagedAttentionRunner() {
  Impl& m = *impl_;
  for (void* p : {static_cast<void*>(m.plan_block), static_cast<void*>(m.arrivals), static_cast<void*>(m.state_o),
                  static_cast<void*>(m.state_lse)})
    cudaFree(p);
  for (Impl::Staging& buffer : m.staging) {
    if (buffer.copied != nullptr) cudaEventSynchronize(buffer.copied), cudaEventDestroy(buffer.copied);
    if (buffer.host != nullptr) cudaFreeHost(buffer.host);
  }
}

void PagedAttentionRunner::prepare(const plan::AttentionPlan& plan) {
  Impl& m = *impl_;
  // Every capacity first: a plan that does not fit leaves the last one intact.
  auto fits = [](std::size_t n, std::int64_t capacity, const char* what) {
    HG_CHECK(static_cast<std::int64_t>(n) <= capacity, "PagedAttentionRunner::upload: plan has ", n, " ", what,
             ", capacity is ", capacity);
  };
  fits(plan.pages.size(), m.capacity.pages, "pages");
  fits(plan.pieces.size(), m.capacity.pieces, "pieces");
  fits(plan.rows.size(), m.capacity.rows, "rows");
  fits(plan.shared_items.size(), m.capacity.shared_items, "shared items");
  fits(plan.suffix_items.size(), m.capacity.suffix_items, "suffix items");
  fits(plan.groups.size(), m.capacity.groups, "merge groups");
  fits(plan.merge_rows.size(), m.capacity.merge_rows, "merge rows");
  HG_CHECK(plan.state_entries <= m.capacity.state_entries, "PagedAttentionRunner::upload: plan needs ",
           plan.state_entries, " partial states, capacity is ", m.capacity.state_entries);
  // The staging buffer to pack, once its last copy has read it.
  Impl::Staging& buffer = m.staging[m.next_staging];
  HG_CUDA_CHECK(cudaEventSynchronize(buffer.copied));
  buffer.choice = choose_launch(PlanSummary::of(plan), m.device, m.overrides);
  const std::int32_t counts[3] = {static_cast<std::int32_t>(plan.shared_items.size()),
                                  static_cast<std::int32_t>(plan.suffix_items.size()),
                                  static_cast<std::int32_t>(plan.merge_rows.size())};
  // The arrays at their places in the plan block; the copy takes the block up to the end of
  // the last array (the unused capacity between arrays goes along: nothing reads past the
  // counts).
  const PlanBlockLayout& layout = m.layout;
  std::size_t end = 0;
  auto put = [&](std::size_t offset, const auto& src) {
    const std::size_t bytes = src.size() * sizeof(src[0]);
    if (bytes > 0) std::memcpy(buffer.host + offset, src.data(), bytes);
    end = std::max(end, offset + bytes);
  };
  put(layout.counts, std::span<const std::int32_t>(counts));
  put(layout.pages, plan.pages);
  put(layout.pieces, plan.pieces);
  put(layout.rows, plan.rows);
  put(layout.shared_items, plan.shared_items);
  put(layout.groups, plan.groups);
  put(layout.merge_rows, plan.merge_rows);
  put(layout.suffix_items, plan.suffix_items);
  buffer.bytes = end;
  m.prepared = m.next_staging;
  m.next_staging ^= 1;
}

void PagedAttentionRunner::upload_prepared(void* stream) {
  Impl& m = *impl_;
  HG_CHECK(m.prepared >= 0, "PagedAttentionRunner::upload_prepared: no plan prepared since the last upload");
  Impl::Staging& buffer = m.staging[m.prepared];
  m.prepared = -1;
  m.choice = buffer.choice;
  auto st = static_cast<cudaStream_t>(stream);
  if (stream == nullptr) {
    HG_CUDA_CHECK(cudaMemcpy(m.plan_block, buffer.host, buffer.bytes, cudaMemcpyHostToDevice));
  } else {
    HG_CUDA_CHECK(cudaMemcpyAsync(m.plan_block, buffer.host, buffer.bytes, cudaMemcpyHostToDevice, st));
    HG_CUDA_CHECK(cudaEventRecord(buffer.copied, st));
  }
}

bool PagedAttentionRunner::has_prepared() const { return impl_->prepared >= 0; }

void PagedAttentionRunner::upload(const plan::AttentionPlan& plan, void* stream) {
  prepare(plan);
  upload_prepared(stream);
}

const LaunchChoice& PagedAttentionRunner::launch_choice() const { return impl_->choice; }

int PagedAttentionRunner::launch_variant() const { return impl_->choice.key(); }

void PagedAttentionRunner::poison_states() {
  Impl& m = *impl_;
  HG_CUDA_CHECK(cudaMemset(m.state_o, 0xff, std::max<std::int64_t>(m.capacity.state_entries, 1) * m.head_dim * 4));
  HG_CUDA_CHECK(cudaMemset(m.state_lse, 0xff, std::max<std::int64_t>(m.capacity.state_entries, 1) * 4));
}

void PagedAttentionRunner::run(const PagedAttentionArgs& args, void* stream, bool shared_only) const {
  const Impl& m = *impl_;
  const LaunchChoice& c = m.choice;
  auto st = static_cast<cudaStream_t>(stream);
  PagedAttentionParams p{};
  p.q = args.q, p.k_pool = args.k_pool, p.v_pool = args.v_pool;
  p.pages = m.pages, p.pieces = m.pieces, p.rows = m.rows, p.groups = m.groups, p.merge_rows = m.merge_rows;
  p.merge_row_count = m.counts + 2;
  p.group_arrivals = m.arrivals;
  p.states = {m.state_o, m.state_lse};
  p.out = args.out, p.out_lse = args.out_lse;
  HG_CHECK(args.page_size > 0 && (args.page_size & (args.page_size - 1)) == 0,
           "PagedAttentionRunner::run: page_size must be a power of two, got ", args.page_size);
  p.page_shift = __builtin_ctz(static_cast<unsigned>(args.page_size));
  p.page_size = args.page_size, p.kv_heads = m.kv_heads, p.q_heads = m.q_heads;
  const float scale = args.scale > 0 ? args.scale : 1.f / std::sqrt(static_cast<float>(m.head_dim));
  p.scale_log2 = scale * 1.4426950408889634f;
  p.rescale_lag = m.overrides.rescale_lag;
  const int shared_grid = m.shared_grid[static_cast<int>(c.shared)];
  if (shared_grid > 0) {
    p.items = m.shared_items, p.item_count = m.counts;
    p.q_after_wait = args.q_from_previous_launch && c.shared_after_previous;
    m.kernels.shared(c.shared).launch(p, shared_grid, st, p.q_after_wait != 0);
    HG_CUDA_CHECK(cudaGetLastError());
  }
  if (shared_only || m.decode_grid == 0) return;
  p.items = m.suffix_items, p.item_count = m.counts + 1;
  const bool after_shared = c.suffix_after_shared && shared_grid > 0;
  if (c.suffix == SuffixKernel::quad) {
    m.kernels.quad.launch(p, m.quad_grid, st, after_shared);
  } else {
    p.merge_launch = c.merge_launch;
    m.kernels.decode_build(c.decode_build).launch(p, m.decode_grid, st, after_shared);
    HG_CUDA_CHECK(cudaGetLastError());
    if (c.merge_launch) m.kernels.split_merge.launch(p, m.merge_grid, st, c.merge_after_decode);
  }
  HG_CUDA_CHECK(cudaGetLastError());
}

}  // namespace hydragen::cuda
