// cpu::matmul driver: quantizes activations into the workspace, then splits weight rows over
// the thread pool and picks the ISA kernel once.
#include "kernels/cpu/matmul.h"

#include <algorithm>
#include <string>

#include "backend/cpu/cpu_features.h"
#include "backend/cpu/thread_pool.h"
#include "core/error.h"
#include "kernels/cpu/matmul_internal.h"

namespace tessera::cpu {

using detail::MatmulArgs;

size_t matmul_workspace_bytes(DType wtype, int64_t m, int64_t k) {
  const int64_t stride = detail::act_row_stride(wtype, k);
  if (stride == 0) return 0;
  return static_cast<size_t>(stride * m + detail::kActAlign);  // + room to align the start
}

void matmul(DType wtype, const void* w, int64_t n, int64_t k, const float* x, int64_t m, float* y,
            int64_t ldy, void* workspace, size_t workspace_bytes, ThreadPool& pool) {
  if (n <= 0 || m <= 0) return;
  const auto row_bytes = dtype_row_bytes(wtype, k);
  TESSERA_CHECK_ARG(row_bytes && k > 0 && ldy >= n,
                    "cpu::matmul: bad shape for " + std::string(dtype_name(wtype)));
  const bool avx2 = cpu_features().avx2;
  const int64_t stride = detail::act_row_stride(wtype, k);
  uint8_t* act = nullptr;
  if (stride > 0) {
    TESSERA_CHECK_ARG(workspace && workspace_bytes >= matmul_workspace_bytes(wtype, m, k),
                      "cpu::matmul: workspace too small");
    const auto base = reinterpret_cast<uintptr_t>(workspace);
    act = reinterpret_cast<uint8_t*>((base + detail::kActAlign - 1) / detail::kActAlign *
                                     detail::kActAlign);
    auto quantize = [&](int64_t i0, int64_t i1, int) {
      for (int64_t i = i0; i < i1; ++i) {
        if (avx2) {
          detail::quantize_act_avx2(wtype, x + i * k, k, act + i * stride);
        } else {
          detail::quantize_act_scalar(wtype, x + i * k, k, act + i * stride);
        }
      }
    };
    if (m * k >= (int64_t{1} << 16)) {
      pool.parallel_for(m, quantize, 1);
    } else {
      quantize(0, m, 0);
    }
  }

  const MatmulArgs args{wtype, static_cast<const uint8_t*>(w), *row_bytes, k, x, act, stride, y,
                        ldy};
  // Weight rows per cache block: each block is reused by every activation tile while it sits
  // in L2 (prefill); for decode (m = 1) it only sets the unit of work sharing.
  const int64_t block_rows =
      std::clamp<int64_t>((128 << 10) / std::max<int64_t>(1, *row_bytes), 4, 64);
  auto work = [&](int64_t r0, int64_t r1, int) {
    for (int64_t r = r0; r < r1; r += block_rows) {
      const int64_t re = std::min(r1, r + block_rows);
      if (avx2) {
        detail::matmul_rows_avx2(args, r, re, 0, m);
      } else {
        detail::matmul_rows_scalar(args, r, re, 0, m);
      }
    }
  };
  // Tiny products are not worth waking the pool for.
  const int64_t bytes_touched = n * *row_bytes * m;
  if (pool.size() == 1 || bytes_touched < (int64_t{32} << 10)) {
    work(0, n, 0);
  } else {
    pool.parallel_for(n, work, 16);
  }
}

}  // namespace tessera::cpu
