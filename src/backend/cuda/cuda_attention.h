// Tree attention on a CUDA device the way the engine's steps run it: the tree paged into
// device pools (plan::page_tree) by device-side copies, planned with plan_options_for_device,
// run by a PagedAttentionRunner. Host-only header (no CUDA types): src/attention/tree_attention.cpp
// calls it when q lives on a CUDA device, after checking the tree and the options.
#pragma once

#include "hydragen/attention.h"

namespace hydragen::cuda {

// Number of CUDA devices (0 when none, or when the driver is missing).
int device_count();

// q: contiguous CUDA tensor [query_rows, Hq, d], bf16 or f16, head dim 64, 96 or 128. K/V on the
// device must be q's dtype with each token's [Hkv, d] contiguous (copied as they are); K/V on
// the host may be any float dtype (converted on the host, copied once). Returns o in q's dtype
// [rows, Hq, d] (the kernels' output) and lse f32 [rows, Hq], both on the device.
// Synchronisation: everything is enqueued on the legacy default stream, so later work on it
// (every Tensor copy, to(Device::cpu)) sees the result, and the call returns without waiting
// for the kernels. It waits only where the inputs or its kept buffers demand it: a copy of K/V
// from host memory waits for the stream and returns once it has read them (CUDA's rule for
// synchronous copies); packing a plan waits for the upload of two calls before to have read
// the same pinned staging; a pool or runner outgrown is freed (a device-wide wait).
AttentionState tree_attention(const SharingTree& tree, const Tensor& q, const TreeAttentionOptions& options);

}  // namespace hydragen::cuda
