// Every fused CUDA op of the forward pass against its CPU twin on the same random inputs
// (the test-backend-ops pattern): one error metric, NMSE = sum (a - b)^2 / sum b^2, with the
// CPU twin run in f32 on the bf16-rounded inputs. Skipped without a CUDA device.
#include <gtest/gtest.h>

#include "cuda_test_util.h"

#include <cmath>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "hydragen/error.h"
#include "hydragen/tensor.h"
#include "core/counter_rng.h"
#include "model/llama.h"
#include "model/llama_cuda.h"
#include "model/model_ops.h"
#include "model/rope.h"
#include "model/weights.h"
#include "paged_model_util.h"
#ifdef HYDRAGEN_WITH_CUDA
#include "backend/cuda/cuda_attention.h"
#include "backend/cuda/model_ops.h"
#include <cuda_runtime.h>
#endif

namespace hydragen {
namespace {


// bf16-exact random values in [-scale, scale) as an f32 CPU tensor.
Tensor random_f32(std::vector<std::int64_t> shape, std::uint64_t stream, float scale = 1.0f) {
  Tensor t = Tensor::empty(shape, DType::f32);
  const std::uint64_t key = stream_key(42, stream);
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    t.data<float>()[i] = bf16_to_float(float_to_bf16(scale * counter_uniform(key, static_cast<std::uint64_t>(i))));
  }
  return t;
}

[[maybe_unused]] Tensor to_cuda_bf16(const Tensor& t) { return t.to(DType::bf16).to(Device::cuda); }
[[maybe_unused]] Tensor to_cpu_f32(const Tensor& t) { return t.to(Device::cpu).to(DType::f32); }

[[maybe_unused]] double nmse(const Tensor& actual, const Tensor& expected) {
  EXPECT_EQ(actual.shape(), expected.shape());
  double diff = 0.0, norm = 0.0;
  for (std::int64_t i = 0; i < expected.numel(); ++i) {
    diff += (actual.get(i) - expected.get(i)) * (actual.get(i) - expected.get(i));
    norm += expected.get(i) * expected.get(i);
  }
  return diff / norm;
}

constexpr double kMaxNmse = 1e-4;  // bf16 output rounding alone is ~1e-5

// The 16-byte kernel's three widths (hidden <= 4096, <= 8192, <= 16384 with hidden % 8 == 0)
// and the scalar kernel (1001: rows not 16-byte aligned; 16392: wider than the 16-byte
// kernel holds), with and without a delta; outputs poisoned first.
TEST(CudaModelOps, AddRmsNormMatchesCpu) {
  SKIP_WITHOUT_GPU();
#ifdef HYDRAGEN_WITH_CUDA
  for (std::int64_t hidden : {64, 1000, 1001, 4096, 5120, 16384, 16392}) {
    for (const bool with_delta : {true, false}) {
      Tensor x = random_f32({7, hidden}, 1), delta = random_f32({7, hidden}, 2), weight = random_f32({hidden}, 3);
      Tensor residual = to_cuda_bf16(x), out = Tensor::empty({7, hidden}, DType::bf16, Device::cuda);
      ASSERT_EQ(cudaMemset(out.raw(), 0xff, out.bytes()), cudaSuccess);
      cuda::add_rms_norm(residual, with_delta ? to_cuda_bf16(delta) : Tensor{}, to_cuda_bf16(weight), 1e-5f, out);
      if (with_delta) add_into(x, delta);
      EXPECT_LT(nmse(to_cpu_f32(residual), x), kMaxNmse) << hidden << " delta " << with_delta;
      EXPECT_LT(nmse(to_cpu_f32(out), rms_norm(x, weight, 1e-5f)), kMaxNmse) << hidden << " delta " << with_delta;
    }
  }
#endif
}

#ifdef HYDRAGEN_WITH_CUDA
// rope_append_kv against apply_rope + a scatter by slot on the CPU, for one head dim.
void check_rope_append_kv(std::int64_t head_dim) {
  SCOPED_TRACE(testing::Message() << "head_dim " << head_dim);
  ModelConfig config;
  config.head_dim = head_dim;
  config.rope.theta = 500000.0;
  config.rope.scaling = RopeScaling::llama3;
  config.rope.factor = 8.0;
  const std::int64_t rows = 5, hq = 8, hkv = 2, d = config.head_dim, slots = 64;
  const Tensor qkv = random_f32({rows, (hq + 2 * hkv) * d}, 4);
  const std::vector<std::int64_t> positions{0, 1, 17, 300, 8191};
  const std::vector<std::int32_t> slot_of_row{3, 60, 0, 31, 9};
  const std::vector<float> inv_freq = rope_inv_freq(config);

  Tensor device_qkv = to_cuda_bf16(qkv);
  Tensor k_cache = Tensor::empty({slots, hkv, d}, DType::bf16, Device::cuda);
  Tensor v_cache = Tensor::empty({slots, hkv, d}, DType::bf16, Device::cuda);
  ASSERT_EQ(cudaMemset(k_cache.raw(), 0xff, k_cache.bytes()), cudaSuccess);  // NaN where nothing is written
  ASSERT_EQ(cudaMemset(v_cache.raw(), 0xff, v_cache.bytes()), cudaSuccess);
  std::vector<std::int32_t> positions32(positions.begin(), positions.end());
  const Tensor device_positions = Tensor::wrap(positions32.data(), {rows}, DType::i32).to(Device::cuda);
  const Tensor device_slots =
      Tensor::wrap(const_cast<std::int32_t*>(slot_of_row.data()), {rows}, DType::i32).to(Device::cuda);
  const Tensor device_freq =
      Tensor::wrap(const_cast<float*>(inv_freq.data()), {d / 2}, DType::f32).to(Device::cuda);
  // q_out: the rotated q heads there, qkv's q columns left as they were.
  Tensor device_qkv2 = to_cuda_bf16(qkv);
  Tensor q_out = Tensor::empty({rows, hq, d}, DType::bf16, Device::cuda);
  ASSERT_EQ(cudaMemset(q_out.raw(), 0xff, q_out.bytes()), cudaSuccess);
  Tensor k_cache2 = Tensor::empty({slots, hkv, d}, DType::bf16, Device::cuda);
  Tensor v_cache2 = Tensor::empty({slots, hkv, d}, DType::bf16, Device::cuda);
  cuda::rope_append_kv(device_qkv2, hq, hkv, device_positions, device_freq, device_slots, k_cache2, v_cache2, &q_out);
  cuda::rope_append_kv(device_qkv, hq, hkv, device_positions, device_freq, device_slots, k_cache, v_cache);

  // The twin: apply_rope on the q and k heads of an f32 copy, then scatter k and v by slot.
  Tensor expected = qkv.clone();
  Tensor heads = expected.reshape({rows, hq + 2 * hkv, d});
  Tensor qk = heads.slice(1, 0, hq + hkv).clone();
  apply_rope(qk, positions, inv_freq);
  heads.slice(1, 0, hq + hkv).copy_from(qk);
  EXPECT_LT(nmse(to_cpu_f32(device_qkv), expected), kMaxNmse);
  const Tensor rotated_q = to_cpu_f32(device_qkv).reshape({rows, hq + 2 * hkv, d}).slice(1, 0, hq).clone();
  EXPECT_TRUE(std::isfinite(nmse(to_cpu_f32(q_out), rotated_q)));
  EXPECT_EQ(nmse(to_cpu_f32(q_out), rotated_q), 0.0) << "q_out holds the in-place run's rotated q, bit for bit";
  const Tensor qkv2 = to_cpu_f32(device_qkv2).reshape({rows, hq + 2 * hkv, d});
  const Tensor qkv_in = to_cpu_f32(to_cuda_bf16(qkv)).reshape({rows, hq + 2 * hkv, d});
  EXPECT_EQ(nmse(qkv2, qkv_in), 0.0) << "qkv stays as it was under q_out (q, k and v columns)";
  const Tensor k_host2 = to_cpu_f32(k_cache2), v_host2 = to_cpu_f32(v_cache2);
  for (std::int64_t r = 0; r < rows; ++r) {  // the written slots, the same bits as the in-place run's
    EXPECT_EQ(nmse(k_host2.select(0, slot_of_row[r]).clone(), to_cpu_f32(k_cache).select(0, slot_of_row[r]).clone()), 0.0);
    EXPECT_EQ(nmse(v_host2.select(0, slot_of_row[r]).clone(), to_cpu_f32(v_cache).select(0, slot_of_row[r]).clone()), 0.0);
  }
  EXPECT_THROW(cuda::rope_append_kv(device_qkv2, hq, hkv, device_positions, device_freq, device_slots, k_cache2,
                                    v_cache2, &k_cache2),
               Error);
  const Tensor k_host = to_cpu_f32(k_cache), v_host = to_cpu_f32(v_cache);
  for (std::int64_t r = 0; r < rows; ++r) {
    EXPECT_LT(nmse(k_host.select(0, slot_of_row[r]).clone(), heads.select(0, r).slice(0, hq, hq + hkv).clone()),
              kMaxNmse);
    EXPECT_LT(nmse(v_host.select(0, slot_of_row[r]).clone(), heads.select(0, r).slice(0, hq + hkv, hq + 2 * hkv).clone()),
              kMaxNmse);
  }
}
#endif

// Head dims 128, 64 and 80 (the 16-byte kernel: head_dim % 16 == 0) and 72 (the scalar
// kernel: 36 pairs, a block of 252 threads).
TEST(CudaModelOps, RopeAppendKvMatchesCpu) {
  SKIP_WITHOUT_GPU();
#ifdef HYDRAGEN_WITH_CUDA
  for (const std::int64_t head_dim : {128, 64, 96, 80, 72}) check_rope_append_kv(head_dim);
#endif
}

// qk_rms_norm against rms_norm over each q and each k head (Qwen3), v left as it was; head
// dims 128 (Qwen3), 64 and 96, and more heads than the grid's first pass covers.
TEST(CudaModelOps, QkRmsNormMatchesCpu) {
  SKIP_WITHOUT_GPU();
#ifdef HYDRAGEN_WITH_CUDA
  for (const auto& [rows, d] : {std::pair<std::int64_t, std::int64_t>{5, 128}, {3, 64}, {7, 96}, {600, 128}}) {
    SCOPED_TRACE(testing::Message() << rows << " rows, head_dim " << d);
    const std::int64_t hq = 8, hkv = 2;
    const Tensor qkv = random_f32({rows, (hq + 2 * hkv) * d}, 11, 3.0f);
    const Tensor q_weight = random_f32({d}, 12), k_weight = random_f32({d}, 13);
    Tensor device_qkv = to_cuda_bf16(qkv);
    cuda::qk_rms_norm(device_qkv, hq, hkv, to_cuda_bf16(q_weight), to_cuda_bf16(k_weight), 1e-6f);
    Tensor expected = qkv.clone();
    Tensor heads = expected.reshape({rows, hq + 2 * hkv, d});
    for (const auto& [first, count, weight] : {std::tuple{std::int64_t{0}, hq, &q_weight}, {hq, hkv, &k_weight}}) {
      const Tensor part = heads.slice(1, first, first + count).clone().reshape({rows * count, d});
      heads.slice(1, first, first + count).copy_from(rms_norm(part, *weight, 1e-6f).reshape({rows, count, d}));
    }
    const Tensor actual = to_cpu_f32(device_qkv);
    EXPECT_LT(nmse(actual, expected), kMaxNmse);
    const Tensor v = actual.reshape({rows, hq + 2 * hkv, d}).slice(1, hq + hkv, hq + 2 * hkv).clone();
    const Tensor v_in = qkv.reshape({rows, hq + 2 * hkv, d}).slice(1, hq + hkv, hq + 2 * hkv).clone();
    EXPECT_EQ(nmse(v, v_in), 0.0) << "v must be untouched";
  }
#endif
}

// silu_mul: the 8-column vector kernel (inter % 8 == 0) and the scalar one (1001), outputs
// poisoned first.
TEST(CudaModelOps, SiluMulAndAddMatchCpu) {
  SKIP_WITHOUT_GPU();
#ifdef HYDRAGEN_WITH_CUDA
  for (const auto& [rows, inter] : {std::pair<std::int64_t, std::int64_t>{9, 1000}, {9, 1001}, {300, 4096}}) {
    const Tensor gate_up = random_f32({rows, 2 * inter}, 5, 4.0f);
    Tensor out = Tensor::empty({rows, inter}, DType::bf16, Device::cuda);
    ASSERT_EQ(cudaMemset(out.raw(), 0xff, out.bytes()), cudaSuccess);
    cuda::silu_mul(to_cuda_bf16(gate_up), out);
    Tensor gate = gate_up.slice(1, 0, inter).clone();
    silu_mul(gate, gate_up.slice(1, inter, 2 * inter).clone());
    EXPECT_LT(nmse(to_cpu_f32(out), gate), kMaxNmse) << rows << " x " << inter;
  }
  const std::int64_t rows = 9, inter = 1000;

  Tensor x = random_f32({rows, inter}, 6), y = random_f32({rows, inter}, 7);
  Tensor device_x = to_cuda_bf16(x);
  cuda::add_into(device_x, to_cuda_bf16(y));
  add_into(x, y);
  EXPECT_LT(nmse(to_cpu_f32(device_x), x), kMaxNmse);
#endif
}

// A copy is exact: the pool after cuda::copy_slots equals the CPU twin's bit for bit. Rows of
// 256 bytes (16-byte chunks) and of 6 bytes (the byte path).
TEST(CudaModelOps, CopySlotsMatchesCpu) {
  SKIP_WITHOUT_GPU();
#ifdef HYDRAGEN_WITH_CUDA
  for (const auto& [hkv, d] : {std::pair<std::int64_t, std::int64_t>{2, 64}, {1, 3}}) {
    const std::int64_t slots = 300, pairs = 120;
    Tensor pool = random_f32({slots, hkv, d}, 8).to(DType::bf16);
    // A fixed permutation of the slots: the first `pairs` are sources, the next `pairs` destinations.
    std::vector<std::int32_t> order(slots);
    for (std::int64_t i = 0; i < slots; ++i) order[i] = static_cast<std::int32_t>((i * 7 + 3) % slots);
    std::vector<std::int32_t> src(order.begin(), order.begin() + pairs), dst(order.begin() + pairs, order.begin() + 2 * pairs);
    const Tensor src_cpu = Tensor::wrap(src.data(), {pairs}, DType::i32), dst_cpu = Tensor::wrap(dst.data(), {pairs}, DType::i32);
    Tensor device_pool = pool.to(Device::cuda);
    cuda::copy_slots(src_cpu.to(Device::cuda), dst_cpu.to(Device::cuda), device_pool);
    copy_slots(src_cpu, dst_cpu, pool);
    const Tensor host = device_pool.to(Device::cpu);
    for (std::int64_t i = 0; i < pool.numel(); ++i) ASSERT_EQ(host.get(i), pool.get(i)) << "d " << d << " element " << i;
  }
#endif
}

// A gather is exact: cuda::gather_rows equals the CPU twin bit for bit, for one-i32 rows (the
// engine's fed tokens: repeated and permuted indices) and for bf16 rows of 6 bytes (the byte path).
TEST(CudaModelOps, GatherRowsMatchesCpu) {
  SKIP_WITHOUT_GPU();
#ifdef HYDRAGEN_WITH_CUDA
  for (const std::vector<std::int64_t>& row_shape : {std::vector<std::int64_t>{}, std::vector<std::int64_t>{3}}) {
    const std::int64_t rows = 300, picked = 257;
    std::vector<std::int64_t> src_shape{rows}, dst_shape{picked};
    src_shape.insert(src_shape.end(), row_shape.begin(), row_shape.end());
    dst_shape.insert(dst_shape.end(), row_shape.begin(), row_shape.end());
    const DType dtype = row_shape.empty() ? DType::i32 : DType::bf16;
    Tensor src = Tensor::empty(src_shape, dtype);
    for (std::int64_t i = 0; i < src.numel(); ++i) src.set(i, static_cast<double>((i * 37) % 251));
    std::vector<std::int32_t> index(static_cast<std::size_t>(picked));
    for (std::int64_t i = 0; i < picked; ++i) index[static_cast<std::size_t>(i)] = static_cast<std::int32_t>((i * 11 + 5) % rows);
    const Tensor index_cpu = Tensor::wrap(index.data(), {picked}, DType::i32);
    Tensor expected = Tensor::empty(dst_shape, dtype), device_out = Tensor::zeros(dst_shape, dtype, Device::cuda);
    gather_rows(src, index_cpu, expected);
    cuda::gather_rows(src.to(Device::cuda), index_cpu.to(Device::cuda), device_out);
    const Tensor host = device_out.to(Device::cpu);
    for (std::int64_t i = 0; i < expected.numel(); ++i) ASSERT_EQ(host.get(i), expected.get(i)) << "element " << i;
  }
#endif
}

TEST(CudaModelOps, RandomWeightsOnDeviceEqualCpu) {
  SKIP_WITHOUT_GPU();
#ifdef HYDRAGEN_WITH_CUDA
  ModelConfig config;
  config.vocab_size = 300;
  config.hidden_size = 64;
  config.intermediate_size = 96;
  config.num_layers = 2;
  config.num_heads = 4;
  config.num_kv_heads = 2;
  config.head_dim = 16;
  config.qkv_bias = true;
  const LlamaWeights cpu = random_weights(config, 11, DType::bf16);
  const LlamaWeights gpu = random_weights(config, 11, DType::bf16, Device::cuda);
  using Pair = std::pair<const Tensor*, const Tensor*>;
  for (const auto& [a, b] : {Pair{&cpu.embed, &gpu.embed}, Pair{&cpu.layers[1].wk, &gpu.layers[1].wk},
                             Pair{&cpu.layers[0].bv, &gpu.layers[0].bv}, Pair{&cpu.final_norm, &gpu.final_norm}}) {
    const Tensor host = b->to(Device::cpu);
    ASSERT_EQ(host.shape(), a->shape());
    for (std::int64_t i = 0; i < a->numel(); ++i) ASSERT_EQ(host.get(i), a->get(i)) << i;
  }
#endif
}

#ifdef HYDRAGEN_WITH_CUDA
// The bf16 CUDA forward pass of `config` against the fp32 CPU one (itself checked against
// transformers) on the same bf16-rounded random weights, both through the paged forward:
// logits within 2e-2 relative at every position in every mode.
void check_forward_matches_cpu(const ModelConfig& config) {
  LlamaWeights cpu_weights = random_weights(config, 5, DType::bf16);
  for_each_weight(config, cpu_weights, [](const std::string&, const std::vector<std::int64_t>&, Tensor& slot,
                                          WeightInit) { slot = slot.to(DType::f32); });
  if (config.tie_word_embeddings) cpu_weights.lm_head = cpu_weights.embed;  // re-point at the f32 copy
  const Llama cpu(config, cpu_weights);
  const LlamaCuda gpu(config, random_weights(config, 5, DType::bf16, Device::cuda));
  std::vector<std::int32_t> prompt;
  for (int i = 0; i < 37; ++i) prompt.push_back(static_cast<std::int32_t>((i * 389 + 7) % config.vocab_size));
  test::CpuStepper cpu_stepper(cpu);
  test::CudaStepper gpu_stepper(gpu);
  const Tensor expected = test::paged_logits(cpu_stepper, AttentionMode::hydragen, prompt);
  for (AttentionMode mode : {AttentionMode::hydragen, AttentionMode::paged, AttentionMode::dense}) {
    const Tensor actual = test::paged_logits(gpu_stepper, mode, prompt);
    EXPECT_LT(std::sqrt(nmse(actual, expected)), 2e-2) << config.architecture << " " << mode_name(mode);
  }
  EXPECT_EQ(test::paged_greedy(gpu_stepper, AttentionMode::hydragen, prompt, 4).size(), 4u);
}

ModelConfig small_config(const char* architecture, std::int64_t head_dim) {
  ModelConfig config;
  config.architecture = architecture;
  config.vocab_size = 1000;
  config.hidden_size = 256;
  config.intermediate_size = 512;
  config.num_layers = 2;
  config.num_heads = 4;
  config.num_kv_heads = 2;
  config.head_dim = head_dim;
  config.max_position_embeddings = 4096;
  return config;
}
#endif

TEST(CudaModel, ForwardMatchesCpuForward) {
  SKIP_WITHOUT_GPU();
#ifdef HYDRAGEN_WITH_CUDA
  ModelConfig qwen2 = small_config("Qwen2ForCausalLM", 64);
  qwen2.qkv_bias = true;
  qwen2.tie_word_embeddings = true;
  check_forward_matches_cpu(qwen2);
#endif
}

// Qwen3's q/k norm (head dim 128, tied) and Phi-3's fused weights (head dim 96, GQA 2/1).
TEST(CudaModel, Qwen3AndPhi3ForwardsMatchCpuForward) {
  SKIP_WITHOUT_GPU();
#ifdef HYDRAGEN_WITH_CUDA
  ModelConfig qwen3 = small_config("Qwen3ForCausalLM", 128);
  qwen3.qk_norm = true;
  qwen3.tie_word_embeddings = true;
  check_forward_matches_cpu(qwen3);
  ModelConfig phi3 = small_config("Phi3ForCausalLM", 96);
  phi3.hidden_size = 192, phi3.num_heads = 2, phi3.num_kv_heads = 1;
  phi3.fused_projections = true;
  check_forward_matches_cpu(phi3);
#endif
}

}  // namespace
}  // namespace hydragen
