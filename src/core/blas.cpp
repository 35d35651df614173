#include "core/blas.h"

#include <cblas.h>

#include <mutex>

namespace hydragen {

void use_single_threaded_blas() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

}  // namespace hydragen
