// The shared-segment attention kernel, warp-specialized (sm_90a; see perf-notes: v10, v13).
//
// Same items, operands and results as shared_attention.cuh's kernel (one item = a range of a
// stacked segment's pieces, a kv head and a tile of 128 stacked query rows; its (o / l, lse)
// goes to its column of the partial-state buffer), organised the way FlashAttention-3 is:
//   - one block of 3 warpgroups per SM. Warpgroup 0 is the producer (setmaxnreg down to
//     kProducerRegs): its warp 0 reads the page table and copies K and V into a ring of kStages
//     stages, 128 keys (two plan pieces) per stage, with TMA (see "How the producer fills a
//     stage" below); its warps 1..3 copy each item's Q rows into the Q tile. Warpgroups 1 and 2
//     are the consumers, 64 query rows each, at kConsumerRegs registers.
//   - per stage two mbarriers: `full` (TMA's transaction bytes, and one arrival per lane of
//     producer warp 0 once its cp.async copies of the stage have landed) and `empty` (each
//     consumer warp's lane 0 arrives once its warpgroup's wgmmas that read the stage are
//     complete). No block-wide barrier in the loop: the producer runs up to kStages blocks
//     ahead, across items.
//   - per 128-key block b a consumer issues S(b) = Q K(b)^T (m64n128k16, 8 k-steps) and then
//     O += P(b-1) V(b-1) (m64n128k16, P from registers, 8 k-steps), waits for S(b) only, runs
//     the online softmax of S(b) while P.V(b-1) is still on the tensor cores, then waits for
//     P.V(b-1), releases stage b-1, rescales O and packs P(b). From block 1 on, a block without
//     masked keys bets that its rows keep their max (exp_at_same_max, v34): the max is
//     checked after the exponentials, each warp alone; where the bet fails the warp moves its
//     maxima from p (rescale_from_p, v35), or, after an overflow, computes its S again by
//     mma.sync (warp_qk) and takes the full step.
// Masking, the exp2-domain softmax, the row layout of the accumulators and the epilogue are
// shared_attention.cuh's. head_dim 128, bf16 or fp16.
//
// Shared memory (1024-byte aligned, 128B swizzle as in shared_attention.cuh):
//   Q: [2 halves][128 rows][128 B] (consumer c owns rows 64c..64c+63, written by itself)
//   stage s (kStages): K [2 halves][128 keys][128 B], then V the same
//   mbarriers: full[kStages], empty[kStages]
#pragma once

#include <cuda.h>

#include <cstdint>

#include "plan/paged_plan.h"
#include "backend/cuda/attention_state.cuh"
#include "backend/cuda/mma.cuh"
#include "backend/cuda/attention_params.cuh"
#include "backend/cuda/shared_attention.cuh"
#include "backend/cuda/wgmma.cuh"

namespace hydragen::cuda {

template <class T>
struct WsSharedTile {
  static constexpr int D = 128;
  static constexpr int kRows = 128;              // query rows per item: 64 per consumer
  static constexpr int kKeys = 2 * plan::kBlockTokens;  // keys per stage: two plan pieces
  static constexpr int kThreads = 384;           // producer + 2 consumer warpgroups
  static constexpr int kStages = 3;
  static constexpr int kQHalf = kRows * 128;
  static constexpr int kKvHalf = kKeys * 128;
  static constexpr int kKvBytes = 2 * kKvHalf;   // K (or V) of one stage
  static constexpr int kStageBytes = 2 * kKvBytes;
  static constexpr int kBarrierOffset = 2 * kQHalf + kStages * kStageBytes;
  // full[kStages], empty[kStages], q_full, q_free; + alignment slack
  static constexpr int kSmemBytes = kBarrierOffset + (2 * kStages + 2) * 8 + 1024;
  static constexpr int kQLoaders = 96;           // producer warps 1..3: they copy Q
  static constexpr int kProducerRegs = 72;       // pieces two blocks ahead, a box slot one ahead
  static constexpr int kConsumerRegs = 216;      // 128 * 72 + 256 * 216 = 64512 <= 65536
  static_assert(plan::kBlockTokens == 64, "a stage holds two 64-key pieces");
};

// How the producer fills a stage (see perf-notes: v13): a whole 64-key piece is copied by TMA
// boxes of min(page_size, 64) keys x 64 dims (K and V, two halves of the head dim: 8 boxes per
// piece at page size 64), which write the 128B-swizzled layout the wgmma descriptors read; one
// lane per box of producer warp 0 issues them after lane 0 added their bytes to `full`'s
// transaction count. A piece that is not whole (a segment's last, shorter piece, or none past
// the item's pieces) is copied by warp 0's lanes with cp.async and zero fill, so keys past a
// piece are zeros, never stale pool data; the lanes hand those copies to the hardware
// (cp.async.mbarrier.arrive.noinc: each lane's `full` arrival happens when they land), and the
// consumers fence the async proxy after their wait. Producer warps 1..3 copy each item's Q rows
// into the Q tile (see perf-notes: v20-qload): once both consumers have released the tile
// (`q_free`: their last S of the item before is complete) the next item's rows go in with
// cp.async and arrive on `q_full`, so the item boundary waits on no global round trip for Q.

// The two consumers take turns issuing their wgmmas (named barriers 3 and 4: ping-pong), so one
// consumer's softmax runs while the other's products use the tensor cores.
// tk / tv: TMA maps of the K and V pools (see encode_kv_tensor_map).
template <class T>
__global__ void __launch_bounds__(384, 1)
    shared_attention_ws_kernel(const PagedAttentionParams p, const __grid_constant__ CUtensorMap tk,
                               const __grid_constant__ CUtensorMap tv) {
#if HYDRAGEN_WGMMA
  constexpr int kStageCopiers = 32;  // producer warp 0 fills the stages
  using Tile = WsSharedTile<T>;
  constexpr int D = Tile::D;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  unsigned char* smem = smem_raw + ((1024 - (ptx::smem_addr(smem_raw) & 1023)) & 1023);
  unsigned char* sq = smem;
  unsigned char* skv = smem + 2 * Tile::kQHalf;
  const std::uint32_t sq_addr = ptx::smem_addr(sq), skv_addr = ptx::smem_addr(skv);
  const std::uint32_t full_addr = ptx::smem_addr(smem + Tile::kBarrierOffset);
  const std::uint32_t empty_addr = full_addr + Tile::kStages * 8;
  const std::uint32_t q_full_addr = empty_addr + Tile::kStages * 8, q_free_addr = q_full_addr + 8;

  // As the previous launch's dependent (p.q_after_wait: its Q loaders are the only readers of q), this block lets its own dependents start only once it has waited for that
  // launch, so that nothing after it runs ahead of the q and K/V that launch writes.
  const bool q_after_wait = p.q_after_wait != 0;
  if (!q_after_wait) allow_dependent_launch();
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, wg = warp / 4;
  if (tid == 0) {
    for (int s = 0; s < Tile::kStages; ++s) {
      wgmma::mbar_init(full_addr + 8 * s, kStageCopiers);  // every lane of producer warp 0 (noinc)
      wgmma::mbar_init(empty_addr + 8 * s, 8);   // lane 0 of every consumer warp
    }
    wgmma::mbar_init(q_full_addr, Tile::kQLoaders);  // every Q loader thread (noinc)
    wgmma::mbar_init(q_free_addr, 2);                // one thread per consumer
  }
  __syncthreads();
  const int group_size = p.q_heads / p.kv_heads;
  const int item_count = *p.item_count;

  if (wg == 0) {
    // ---------------------------------------------------------------- producer
    wgmma::setmaxnreg_dec<Tile::kProducerRegs>();
    const T* kp = static_cast<const T*>(p.k_pool);
    const T* vp = static_cast<const T*>(p.v_pool);
    const int c = tid % 16;        // this thread's 16-byte chunk of every key row it copies
    const int key0 = tid / 16;     // its first key of a piece (copy_piece: then every second)
    int issued = 0;
    // Pieces of block pi / 2 (tokens 0 past the item's pieces).
    auto load_pieces = [&](const plan::PlanItem& it, int pi, plan::PlanPiece (&pc)[2]) {
#pragma unroll
      for (int h = 0; h < 2; ++h)
        pc[h] = pi + h < it.piece_count ? p.pieces[it.piece_begin + pi + h] : plan::PlanPiece{0, 0, 0, 0};
    };
    // cp.async of one piece's keys into its half of a stage by producer warp 0 (this lane:
    // keys key0 + 2 i); zeros past the piece.
    auto copy_piece = [&](const plan::PlanPiece& pc, int h, int kv_head, unsigned char* sk) {
      unsigned char* sv = sk + Tile::kKvBytes;
      constexpr int kKeyStep = kStageCopiers / 16;
#pragma unroll 8
      for (int i = 0; i < 64 / kKeyStep; ++i) {
        const int key = key0 + kKeyStep * i, tok = pc.token_begin + key;
        const bool valid = key < pc.tokens;
        const std::int64_t slot = valid ? pool_slot(p, pc, tok) : 0;
        const std::int64_t off = (slot * p.kv_heads + kv_head) * D + c * 8;
        const int o = swizzled_offset(64 * h + key, c, Tile::kKvHalf);
        ptx::cp_async_16(sk + o, kp + off, valid);
        ptx::cp_async_16(sv + o, vp + off, valid);
      }
    };
    if (warp > 0) {
      // Q loader: tile rows lt and lt + 96 (< 128) of every item of this block, 16 chunks each.
      const int lt = tid - 32;
      int k = 0;
      for (int item_index = blockIdx.x; item_index < item_count; item_index += gridDim.x, ++k) {
        const plan::PlanItem it = p.items[item_index];
        std::int64_t src[2];
        bool valid[2];
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const int r = lt + Tile::kQLoaders * j;
          valid[j] = r < it.row_count && r < Tile::kRows;
          src[j] = 0;
          if (valid[j]) {
            const plan::PlanRow row = p.rows[it.row_begin + r];
            src[j] = (std::int64_t{row.token} * p.q_heads + it.kv_head * group_size + row.group) * D;
          }
        }
        if (k == 0 && q_after_wait) {  // q is the previous launch's: wait for it here, with the item read
          wait_for_previous_launch();
          allow_dependent_launch();
        }
        if (k > 0) wgmma::mbar_wait(q_free_addr, (k - 1) & 1);  // the consumers are done with the last Q
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const int r = lt + Tile::kQLoaders * j;
          if (r >= Tile::kRows) continue;
          const T* q = static_cast<const T*>(p.q) + src[j];
#pragma unroll
          for (int c16 = 0; c16 < 16; ++c16) ptx::cp_async_16(sq + swizzled_offset(r, c16, Tile::kQHalf), q + c16 * 8, valid[j]);
        }
        wgmma::mbar_arrive_cp_async(q_full_addr);
      }
      // A block without items still finishes only after the previous launch (its completion
      // must imply that launch's, for the launches after this one).
      if (k == 0 && q_after_wait) wait_for_previous_launch();
      ptx::cp_async_commit();
      ptx::cp_async_wait<0>();  // nothing of this thread's in flight when it exits
      return;
    }
    // Lane l of warp 0 owns box l of a stage: piece h, chunk j of box_keys keys, head-dim
    // half dh, tensor t (K or V). Page sizes are multiples of 16 (build_attention_plan), so a
    // stage has at most 2 x 4 x 4 = 32 boxes: one per lane.
    const int box_keys = p.page_size < 64 ? p.page_size : 64;
    const int boxes_per_piece = (64 / box_keys) * 4;
    const int h = lane / boxes_per_piece, j = lane % boxes_per_piece / 4, dh = lane / 2 % 2, t = lane % 2;
    const bool box_lane = lane < 2 * boxes_per_piece;
    auto whole = [&](const plan::PlanPiece& pc) {
      return pc.tokens == 64 && (pc.token_begin & (box_keys - 1)) == 0;
    };
    // Pool slot of this lane's box in block (pieces) pc; -1 where its piece is not whole.
    auto box_slot = [&](const plan::PlanPiece (&pc)[2]) {
      const plan::PlanPiece piece = h == 0 ? pc[0] : pc[1];  // no dynamic index: pc stays in registers
      if (!box_lane || !whole(piece)) return -1;
      const int tok = piece.token_begin + j * box_keys;
      return pool_slot(p, piece, tok);
    };
    for (int item_index = blockIdx.x; item_index < item_count; item_index += gridDim.x) {
      const plan::PlanItem it = p.items[item_index];
      if (it.piece_count == 0) continue;
      // Pieces two blocks ahead, this lane's box slot one block ahead.
      plan::PlanPiece pc[2], next[2];
      load_pieces(it, 0, pc);
      load_pieces(it, 2, next);
      int slot = box_slot(pc);
      for (int pi = 0; pi < it.piece_count; pi += 2) {
        plan::PlanPiece after[2];
        load_pieces(it, pi + 4, after);
        const int next_slot = box_slot(next);
        const int stage = issued % Tile::kStages;
        const std::uint32_t full = full_addr + 8 * stage;
        wgmma::mbar_wait(empty_addr + 8 * stage, ((issued / Tile::kStages) & 1) ^ 1);
        unsigned char* sk = skv + stage * Tile::kStageBytes;
        const bool w0 = whole(pc[0]), w1 = whole(pc[1]);
        if (w0 || w1) {
          if (lane == 0) wgmma::mbar_expect_tx(full, (int(w0) + int(w1)) * 2 * 64 * D * int(sizeof(T)));
          __syncwarp();
          if (slot >= 0)
            wgmma::tma_load_3d(ptx::smem_addr(sk + t * Tile::kKvBytes + dh * Tile::kKvHalf + (64 * h + j * box_keys) * 128),
                               t == 0 ? static_cast<const void*>(&tk) : static_cast<const void*>(&tv), 64 * dh, it.kv_head,
                               slot, full);
        }
        if (!w0) copy_piece(pc[0], 0, it.kv_head, sk);
        if (!w1) copy_piece(pc[1], 1, it.kv_head, sk);
        wgmma::mbar_arrive_cp_async(full);
        ++issued;
#pragma unroll
        for (int x = 0; x < 2; ++x) pc[x] = next[x], next[x] = after[x];
        slot = next_slot;
      }
    }
    ptx::cp_async_commit();
    ptx::cp_async_wait<0>();  // nothing of this thread's in flight when it exits
    return;
  }

  // ------------------------------------------------------------------ consumers
  wgmma::setmaxnreg_inc<Tile::kConsumerRegs>();
  const int cw = wg - 1;                                  // consumer 0 or 1: rows 64 cw ..
  const int ctid = tid - 128 * wg;                        // 0..127 within the warpgroup
  const int r0 = cw * 64 + (warp % 4) * 16 + lane / 4;    // this thread's rows: r0 and r0 + 8
  int consumed = 0;
  const float lag_pow2 = exp2f(p.rescale_lag);  // exp_at_same_max's bound on a thread's part of a row sum
  const std::uint64_t v_desc = wgmma::desc(skv_addr + Tile::kKvBytes, Tile::kKvHalf, 1024);  // stage 0's V
  // Turns: wait for mine before issuing, hand over after. Consumer 1 hands consumer 0 its first.
  auto my_turn = [&] { wgmma::named_barrier(3 + cw, 256); };
  auto their_turn = [&] { asm volatile("bar.arrive %0, 256;\n" ::"r"(3 + (cw ^ 1)) : "memory"); };
  if (cw == 1) their_turn();
  // The next item is read under the last P.V of this one, so the boundary between
  // items waits on neither it nor Q.
  plan::PlanItem it = blockIdx.x < item_count ? p.items[blockIdx.x] : plan::PlanItem{};
  int k = 0;
  for (int item_index = blockIdx.x; item_index < item_count; item_index += gridDim.x, ++k) {
    const int next_index = item_index + gridDim.x;
    plan::PlanItem next{};
    auto read_next = [&] {
      if (next_index < item_count) next = p.items[next_index];
    };
    // This consumer's S reads of the Q tile are done (every warp's: the barrier); the loader may
    // copy the next item's rows once both consumers say so.
    auto release_q = [&] {
      wgmma::named_barrier(1 + cw, 128);
      if (ctid == 0) wgmma::mbar_arrive(q_free_addr);
    };
    wgmma::mbar_wait(q_full_addr, k & 1);
    wgmma::fence_proxy_async();  // the loader's cp.async writes -> the tensor cores' reads

    // The epilogue's entries read now (not after the last P.V: a round trip at the boundary).
    int limit[2], entry[2];
    const int min_limit = row_key_limits(p, it, r0, limit);
    tile_state_entries(p, it, r0, group_size, entry);
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
    float o[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) o[i] = 0.f;
    std::uint32_t pk[8][4];  // P of the previous block, packed: the A operand of its P.V
    float s[64] = {};  // (S is overwritten by its first k-step: zeroed once, not per block)
    auto load_pieces = [&](plan::PlanPiece (&piece)[2], int pi) {  // block pi / 2's pieces
      piece[0] = p.pieces[it.piece_begin + pi];
      piece[1] = pi + 1 < it.piece_count ? p.pieces[it.piece_begin + pi + 1] : plan::PlanPiece{0, 0, 0, 0};
    };
    auto wait_full = [&] {  // -> the next block's stage, once its K and V are in
      const int stage = consumed % Tile::kStages;
      wgmma::mbar_wait(full_addr + 8 * stage, (consumed / Tile::kStages) & 1);
      wgmma::fence_proxy_async();  // the producer's cp.async writes -> wgmma
      ++consumed;
      return stage;
    };
    auto issue_s = [&](int stage) {  // S = Q K^T (the first k-step overwrites s), committed as one group
      const std::uint32_t k_addr = skv_addr + stage * Tile::kStageBytes;
      wgmma::fence_operands(s);
      wgmma::fence_operands(o);
      wgmma::fence();
      wgmma_qk<T, 128, true>(s, sq_addr + cw * 64 * 128, Tile::kQHalf, k_addr, Tile::kKvHalf);
      wgmma::commit();
    };
    auto issue_pv = [&](int stage) {  // O += P V of a stage, committed as one group
      const std::uint64_t vd = wgmma::desc_at(v_desc, stage * Tile::kStageBytes);
#pragma unroll
      for (int j = 0; j < Tile::kKeys / 16; ++j) wgmma_o<T>(o, pk[j], wgmma::desc_at(vd, j * 16 * 128));
      wgmma::commit();
    };
    auto keep_pk = [&] {  // pk stays allocated until its P.V is waited for
#pragma unroll
      for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) asm volatile("" : "+r"(pk[j][e])::"memory");
    };
    // Mask (past a piece, or causal) only where needed; online softmax of s, scale folded in.
    auto softmax = [&](const plan::PlanPiece (&piece)[2], float (&alpha)[2]) -> bool {
      if (piece[0].tokens < 64 || piece[1].tokens < 64 || piece[0].position + 64 > min_limit ||
          piece[1].position + 64 > min_limit) {
#pragma unroll
        for (int nt = 0; nt < 16; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int h = nt / 8, key = (nt % 8) * 8 + (lane % 4) * 2 + (e & 1);
            if (!(key < piece[h].tokens && piece[h].position + key < limit[e / 2])) s[nt * 4 + e] = -INFINITY;
          }
      }
      return online_softmax_step(s, m, l, p.scale_log2, p.rescale_lag, alpha);
    };
    auto pack_p = [&] {
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        pk[j][0] = ptx::pack2<T>(s[8 * j + 0], s[8 * j + 1]);
        pk[j][1] = ptx::pack2<T>(s[8 * j + 2], s[8 * j + 3]);
        pk[j][2] = ptx::pack2<T>(s[8 * j + 4], s[8 * j + 5]);
        pk[j][3] = ptx::pack2<T>(s[8 * j + 6], s[8 * j + 7]);
      }
    };

    if (it.piece_count > 0) {
      // Blocks [0, whole_blocks) have no masked key (v34): all their pieces hold 64 keys (only an
      // item's last piece may hold fewer, and the positions of its pieces run on from block 0's
      // first: check_plan in paged_attention_cpu.cpp) and lie below every row's causal limit.
      // The last piece is read here and used from block 1 on, so block 0 does not wait for it.
      const plan::PlanPiece last_piece = p.pieces[it.piece_begin + it.piece_count - 1];
      // Block 0: S, softmax (o is still 0), P.
      plan::PlanPiece piece[2];
      float alpha[2];
      load_pieces(piece, 0);
      const int first_position = piece[0].position;
      int prev_stage = wait_full();
      my_turn();
      issue_s(prev_stage);
      their_turn();
      wgmma::wait<0>();
      wgmma::fence_operands(s);
      if (it.piece_count <= 2) release_q();
      softmax(piece, alpha);
      pack_p();
      const int whole_pieces = it.piece_count - (last_piece.tokens < 64 ? 1 : 0);
      // (the warp's least: each warp decides its blocks' path alone, v35)
      const int whole_blocks =
          __reduce_min_sync(0xffffffffu, min(whole_pieces, max(0, (min_limit - first_position) / 64)) / 2);
      // Block b: S(b) and P.V(b - 1) issued; S(b) waited; its softmax under P.V(b - 1).
      for (int pi = 2; pi < it.piece_count; pi += 2) {
        const int stage = wait_full();
        my_turn();
        issue_s(stage);
        issue_pv(prev_stage);
        their_turn();
        wgmma::wait<1>();
        wgmma::fence_operands(s);
        // The same-max bet (v34) on the warp's unmasked blocks. Where a thread of the warp loses
        // it, the warp moves its maxima from p (v35), or in the rare case that cannot (an
        // overflow), computes its S again by mma.sync from the Q tile and the stage (both held).
        bool rescale = false;
        if (pi / 2 < whole_blocks) {
          float sum[2];
          if (__all_sync(0xffffffffu, exp_at_same_max(s, m, p.scale_log2, lag_pow2, sum))) {
            l[0] += sum[0];
            l[1] += sum[1];
          } else {
            rescale = true;
            if (!rescale_from_p(s, m, l, lag_pow2, alpha)) {
              warp_qk<T>(s, sq, cw * 64 + (warp % 4) * 16, Tile::kQHalf, skv + stage * Tile::kStageBytes,
                         Tile::kKvHalf, lane);
              rescale = online_softmax_step(s, m, l, p.scale_log2, p.rescale_lag, alpha);
            }
          }
        } else {
          load_pieces(piece, pi);
          rescale = softmax(piece, alpha);
        }
        if (pi + 2 >= it.piece_count) release_q();  // (after any warp_qk of this block)
        wgmma::wait<0>();  // P.V(b - 1): o and pk are free, its stage is read
        wgmma::fence_operands(o);
        keep_pk();
        if (lane == 0) wgmma::mbar_arrive(empty_addr + 8 * prev_stage);
        if (rescale) {
#pragma unroll
          for (int i = 0; i < 64; ++i) o[i] *= alpha[(i / 2) % 2];
        }
        pack_p();
        prev_stage = stage;
      }
      // The last block's P.V.
      wgmma::fence_operands(o);
      wgmma::fence();
      my_turn();
      issue_pv(prev_stage);
      their_turn();
      read_next();
      wgmma::wait<0>();
      wgmma::fence_operands(o);
      keep_pk();
      if (lane == 0) wgmma::mbar_arrive(empty_addr + 8 * prev_stage);
    } else {
      release_q();  // (no S read the tile)
    }

    write_tile_states(p, entry, o, m, l, lane);
    if (it.piece_count == 0) read_next();  // (else read under the last P.V)
    it = next;
  }
#endif
}

}  // namespace hydragen::cuda
