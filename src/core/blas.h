// The process's BLAS (OpenBLAS) runs every call on the calling thread: our ThreadPool splits
// the work (the attention tiles, the linear layers' column blocks), so BLAS threads inside it
// would oversubscribe the cores. Setting it before the first BLAS call of the process matters:
// when the first attention tile set it, the forward pass's first projections had run
// multi-threaded and rounded differently from every later one (the first generation of a
// process gave logprobs ~1e-6 apart from the same generation repeated), and every linear
// layer after it ran on one core.
#pragma once

namespace hydragen {

// Idempotent and thread-safe; call before any cblas_* call.
void use_single_threaded_blas();

}  // namespace hydragen
