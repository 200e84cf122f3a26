// CUDA decode attention: one query token per sequence against a long f16 KV cache, with GQA.
//
// Layout: q, out: n_seq x n_heads x head_dim (T = __half or __nv_bfloat16). The cache of sequence
// s is rows [s * max_ctx, s * max_ctx + seq_lens[s]) of k_cache / v_cache, each row
// n_kv_heads x head_dim halves (what cuda::rope_kv_write writes). seq_lens lives on the device
// (so a captured graph replays with new lengths); each must be in [1, max_ctx].
// Query head h uses kv head h / (n_heads / n_kv_heads). head_dim: 64 or 128;
// n_heads / n_kv_heads: 1, 2, 4 or 8.
//
// Method (split-KV, "flash decoding"): the context is cut into n_splits chunks; block
// (split, kv head, seq) streams its chunk's K and V rows ONCE for all query heads of the group
// (online softmax in registers), writes an unnormalized partial (acc, max, sum) to the workspace,
// and a combine kernel merges the splits. The split count depends only on max_ctx and the
// device, so the workspace size is fixed per (batch bucket, max_ctx) and graphs stay valid.
//
// With qx / qmeta non-null, out is also quantized for the next GEMV (act_quant.h; the combine
// kernel does it, so out's reference rounded to T then ref::quantize_act_q8). Launches with PDL.
//
// Numerics: q is rounded to f16 before the QK product (the f16-KV contract of
// ref::attention(..., f16_products=true)); probabilities stay f32 (the reference rounds the
// normalized ones to f16, which an online softmax cannot see; the difference is within nMSE).
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/act_quant.h"

namespace tessera::cuda {

// Split count and workspace size (bytes) for a launch with these sizes on the current device.
int decode_attention_splits(int64_t n_seq, int64_t n_kv_heads, int64_t max_ctx);
size_t decode_attention_workspace_bytes(int64_t n_seq, int64_t n_heads, int64_t n_kv_heads,
                                        int64_t head_dim, int64_t max_ctx);

template <class T>
void decode_attention(const T* q, const __half* k_cache, const __half* v_cache,
                      const int32_t* seq_lens, int64_t n_seq, int64_t max_ctx, int64_t n_heads,
                      int64_t n_kv_heads, int64_t head_dim, float scale, void* workspace,
                      size_t workspace_bytes, T* out, cudaStream_t stream, int8_t* qx = nullptr,
                      ActQ8Meta* qmeta = nullptr);

}  // namespace tessera::cuda
