// Batch-1 decode of every layer of a Llama-family model in ONE persistent kernel launch, for
// quantized projections (one integer-dot type for all four: Q8_0, Q4_0, Q4_1, Q4_K; the
// repacked layout of gemv.h and the products of mmq.h).
//
// Why: at one row a layer is ~9 short kernels whose starts, ramps and drains cost more than
// their work (H200, q4_0 Llama-3-8B: ~64 us per layer against a ~30 us weight floor). Here a
// grid of 2 blocks per SM runs all layers' phases in order, with a grid barrier between
// dependent phases. Weights stream through a ring of shared-memory slots per block, filled by
// bulk copies (cp.async.bulk) in the block's fixed order of stages (every layer's q|k|v, o,
// gate|up, down rows of that block), each slot refilled as soon as the block has used it: the
// copies run ahead across barriers, attention and row forming (weights never depend on
// activations).
//
// Per layer (x: the f32 residual row, updated in place):
//   1. every block forms RMSNorm(x) quantized in its shared memory; q|k|v GEMV with RoPE and the
//      f16 KV-cache write (QkvRopeEpi) -> q                                            barrier
//   2. attention of the one query row over cache positions [0, pos]: items (kv head, 32 keys),
//      one block each, partial softmaxes to the workspace; the last item of a kv head merges
//      them -> attn (f32)                                                              barrier
//   3. every block forms quantize(attn) in shared memory; o GEMV, x += o               barrier
//   4. every block forms RMSNorm(x) quantized; gate|up GEMV -> gu (f32)                barrier
//   5. SwiGLU(gu) quantized by all warps of the grid -> qx, meta (global)              barrier
//   6. down GEMV, x += down                                                            barrier
// The activations are quantized exactly as mmq_quantize_rows / mmq_rms_norm_quantize_rows /
// mmq_swiglu_quantize_rows quantize them (the same device code, mmq_quant.cuh), and the GEMV
// products are mmq_gemv's per block (mmq_gemv_formats.cuh); attention is f32 over the f16
// cache (q not rounded to f16, unlike paged_attention's tensor-core path).
//
// Status (H200, dummy Llama-3-8B, 512 context): correct (tests/cuda/llama_cuda_test.cpp,
// against the kernel chain) but slower than the chain it replaces: q4_0 2.7 vs 1.9 ms per
// token; so the engine takes it only with TESSERA_PERSISTENT_DECODE=1. The stage loops run at
// ~60 % of HBM bandwidth (per-stage costs on 16 warps per SM) and ~1/3 of each layer is outside
// them (barriers, row forming, attention): docs/design/cuda_engine_history.md, session 8.
// TESSERA_PERSISTENT_TIMING=1 prints per-phase times (eager launches, every 50th);
// TESSERA_PERSISTENT_SLOT_KB sets the ring's slot size (experiments).
//
// Graph-capturable (no allocation, no host synchronization); launched cooperatively, so all
// blocks are resident. The workspace holds the grid barrier's counter and the attention
// merge counters (zeroed once by decode_persistent_workspace_reset; every launch leaves them
// valid for the next) and the attention partials. One launch at a time per workspace.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "kernels/cuda/gemv.h"
#include "kernels/cuda/mmq.h"

namespace tessera::cuda {

// One layer's device pointers.
struct PersistentLayer {  // weights 16-byte aligned (they are copied with cp.async.bulk)
  const void* wqkv;  // repacked [q_rows + 2 kv_rows][d]
  const void* wo;    // [d][q_rows]
  const void* wgu;   // [2 ff][d]: gate rows, then up rows
  const void* wd;    // [d][ff]
  const float* attn_norm;
  const float* ffn_norm;
  __half* k_cache;  // rows of kv_rows halves
  __half* v_cache;
};

struct PersistentDecode {
  DType type;                      // of every projection
  const PersistentLayer* layers;   // DEVICE array of n_layers
  int64_t n_layers;
  int64_t d, n_heads, n_kv_heads, head_dim, ff;
  float norm_eps;
  bool norms_aligned;              // every layer's norm weights 16-byte aligned
  float scale;                     // attention logit scale
  int64_t n_rot;                   // RoPE (interleaved pairs)
  const double* inv_freq;          // DEVICE, n_rot / 2
  const int32_t* pos;              // DEVICE: the row's position
  const int64_t* cache_row;        // DEVICE: its KV-cache row
  const int32_t* block_table;      // DEVICE: the sequence's block table
  int64_t block_size, table_capacity;  // positions the table can hold (stride x block size)
  float* x;                        // DEVICE residual row (d), in and out
  float* q;                        // DEVICE scratch: n_heads x head_dim
  float* attn;                     // DEVICE scratch: n_heads x head_dim
  float* gu;                       // DEVICE scratch: 2 ff
  int8_t* qx;                      // DEVICE scratch: ff (16-byte aligned)
  MmqActMeta* meta;                // DEVICE scratch: ff / 32
  void* ws;                        // decode_persistent_workspace_bytes, 16-byte aligned
};

// Whether the persistent step handles these shapes and type (else use the kernel chain).
bool decode_persistent_supported(DType type, int64_t n_layers, int64_t d, int64_t n_heads, int64_t n_kv_heads,
                                 int64_t head_dim, int64_t ff);
size_t decode_persistent_workspace_bytes(int64_t n_kv_heads, int64_t n_heads, int64_t head_dim,
                                         int64_t table_capacity);
void decode_persistent_workspace_reset(void* ws, cudaStream_t stream);
void decode_persistent(const PersistentDecode& p, cudaStream_t stream);
// Launches so far in this process (tests check that a path took the persistent step).
uint64_t decode_persistent_launches();

}  // namespace tessera::cuda
