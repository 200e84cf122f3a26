// LLM layer ops on Tensors: validate -> dispatch(device, dtype) -> kernel. Outputs are passed
// in; errors are typed (tessera::Error) and name the op.
#pragma once

#include "core/tensor.h"
#include "kernels/cpu/llm_ops.h"
#include "kernels/ref/llm_ops.h"

namespace tessera {
class ThreadPool;
}

namespace tessera::ops {

using ref::RopeLayout;
using ref::RopeParams;
using cpu::KvPages;

// x, y: [rows, d] f32; w: [d] f32.
void rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor& y);
// residual += x; y = rms_norm(residual).
void add_rms_norm(Tensor& residual, const Tensor& x, const Tensor& w, float eps, Tensor& y);
// x: [rows, n_heads, head_dim] f32, rotated in place; positions: rows entries.
void rope(Tensor& x, const int32_t* positions, const RopeParams& p);
// q: [rows, n_heads, head_dim] f32; k, v: paged caches [n_blocks * block_size, n_kv_heads,
// head_dim] f32 or f16; pages: each row's block table (cpu::KvPages). Row r attends causally to
// positions [0, q_pos[r]] of its sequence. With f16 K/V, q is rounded to f16 for the QK product
// and pages.multi_row picks each row's float order.
// scratch: f32 workspace of at least cpu::attention_workspace_floats(max q_pos + 1, ...).
void attention(const Tensor& q, const int32_t* q_pos, const KvPages& pages, const Tensor& k,
               const Tensor& v, float scale, Tensor& out, Tensor& scratch, ThreadPool& pool);
// out = silu(gate) * up; f32, the same element count and innermost dimension (rows of dim(-1)).
// SiLU has llama.cpp's CPU bits, which depend on the row length (kernels/cpu/silu.h).
void swiglu(const Tensor& gate, const Tensor& up, Tensor& out);

}  // namespace tessera::ops

namespace tessera::ops {
// y[r] += b for every row r of y ([rows, n] f32), b: [n] f32 (QKV bias).
void add_bias(Tensor& y, const Tensor& b);
}  // namespace tessera::ops
