// CUDA greedy argmax over one row of logits: out_index = the smallest i with x[i] maximal.
// NaN never wins (it compares as -inf); an all-NaN/-inf row gives 0. T: float, __half,
// __nv_bfloat16. Two launches (block partials, then one block), fixed workspace, no allocation
// and no synchronization, so it captures into the decode graph; only the index leaves the GPU.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace tessera::cuda {

size_t argmax_workspace_bytes();

template <class T>
void argmax(const T* x, int64_t n, void* workspace, int32_t* out_index, cudaStream_t stream);

}  // namespace tessera::cuda
