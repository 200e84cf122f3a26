// Tensor maps (TMA descriptors) for Hopper's bulk tensor copies (cp.async.bulk.tensor), encoded on
// the host through the driver's cuTensorMapEncodeTiled, looked up once through the runtime (no
// link against libcuda). A map is a 128-byte value passed to a kernel as a
// `const __grid_constant__ CUtensorMap` parameter; it is captured by value in CUDA graphs.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace tessera::cuda {

// A row-major bf16 matrix [rows][cols] with `ld` elements between rows, copied in boxes of
// box_rows x 64 columns (128 bytes) into shared memory in the 128-byte swizzle that wgmma's
// descriptors expect (wgmma.cuh: wgmma_desc_sw128); destinations 1024-byte aligned. Elements
// outside the matrix (rows past `rows`) arrive as zeros. Throws tessera::Error when the driver
// lacks the entry point or rejects the shape (base 16-byte aligned, ld * 2 a multiple of 16,
// 1 <= box_rows <= 256).
CUtensorMap bf16_sw128_tensor_map(const void* base, int64_t rows, int64_t cols, int64_t ld, int box_rows);

}  // namespace tessera::cuda
