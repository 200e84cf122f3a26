#include "backend/cuda/tensor_map.h"

#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <string>

#include "backend/cuda/cuda_check.h"
#include "core/error.h"

namespace tessera::cuda {
namespace {

PFN_cuTensorMapEncodeTiled_v12000 encode_tiled() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found{};
    TESSERA_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &found));
    if (found != cudaDriverEntryPointSuccess || p == nullptr)
      throw_error(ErrorCode::kUnsupported,
                  "cuda: the driver has no cuTensorMapEncodeTiled (Hopper tensor copies need driver >= 12.0)");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  }();
  return fn;
}

}  // namespace

CUtensorMap bf16_sw128_tensor_map(const void* base, int64_t rows, int64_t cols, int64_t ld, int box_rows) {
  TESSERA_CHECK_ARG(rows >= 1 && cols >= 64 && ld >= cols && ld * 2 % 16 == 0 && box_rows >= 1 && box_rows <= 256 &&
                        reinterpret_cast<uintptr_t>(base) % 16 == 0,
                    "cuda::bf16_sw128_tensor_map: bad shape or alignment");
  CUtensorMap map;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(ld) * 2};
  const cuuint32_t box[2] = {64, static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t elem_strides[2] = {1, 1};
  const CUresult r = encode_tiled()(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void*>(base), dims, strides, box,
                                    elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                    CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw_error(ErrorCode::kInternal, "cuda::bf16_sw128_tensor_map: cuTensorMapEncodeTiled failed (CUresult " +
                                          std::to_string(static_cast<int>(r)) + ")");
  return map;
}

}  // namespace tessera::cuda
