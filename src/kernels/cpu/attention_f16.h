// Attention over an f16 KV cache with the float order of llama.cpp's CPU backend (AVX-512
// build, non-flash path, llama-cpp-python's default), so that its outputs carry llama.cpp's bits.
// 8-bit activation quantization downstream turns any last-bit difference into rounding flips
// that compound over layers (docs/design/llm_cpu_path.md), so every step is reproduced:
//
//  - scores: q (rounded to f16 by the caller) . k, times scale. Calls with >= 2 query rows
//    ("batched", llama.cpp's prompt processing through llamafile's tinyBLAS) accumulate 16
//    lanes, lane l taking elements l, l+16, ... with fma, then reduce the lanes as
//    red16: (v[i] + v[i+8]), then (+4), then ((0)+(2)) + ((1)+(3)). Single-row calls (decode,
//    ggml_vec_dot_f16) accumulate 4 x 16 lanes over steps of 64 elements, combine them as
//    (A0 + A2) + (A1 + A3), apply red16, and add elements past the last whole step in double.
//  - softmax: e = silu_exp(s - max) (ggml's vector exp; llama.cpp pads the key count to a
//    multiple of 256, so no key takes its libm tail), sum = double sum over blocks of 16 keys
//    of red16(block), p = e * (float)(1 / sum), rounded to f16.
//  - output: sum over keys of p * v in the same two orders, with keys in the role of elements
//    (positions past the last key count as zeros, as llama.cpp's masked padding does).
//
// Verified bit for bit against llama.cpp 0.3.36 with head_dim 64 (the default model): the
// attention outputs of all 30 layers, for a prompt and for a decode step, were compared with
// ggml's (eval callback) during development; tests/reference/test_llm_vs_llama_cpp.py guards
// the end result (teacher-forced KL <= 1e-9, identical greedy continuations).
#pragma once

#include <cstdint>

namespace tessera::cpu::detail {

struct AttnF16Job {
  const float* q;     // group query heads x head_dim, values already rounded to f16
  const uint16_t* k;  // this kv head in cache row 0; cache rows kv_row_stride elements apart
  const uint16_t* v;
  int64_t kv_row_stride;
  const int32_t* table;  // block table: position t is cache row table[t / bs] * bs + t % bs
  int64_t block_size;
  int64_t len;  // keys 0..len-1 are visible
  int64_t head_dim;
  int64_t group;  // query heads sharing this kv head
  float scale;
  bool batched;  // the row is one of several of its sequence (llama.cpp's prompt order)
  float* out;    // group x head_dim
  float* ws;     // attention_f16_job_floats(n_kv, head_dim, group) floats
};

// Element offset of position t's row (paged cache).
inline int64_t kv_pos_offset(const AttnF16Job& j, int64_t t) {
  return (int64_t{j.table[t / j.block_size]} * j.block_size + t % j.block_size) * j.kv_row_stride;
}

// Scratch floats one job needs for up to n_kv keys.
int64_t attention_f16_job_floats(int64_t n_kv, int64_t head_dim, int64_t group);

void attention_f16_job_scalar(const AttnF16Job& j);
void attention_f16_job_avx2(const AttnF16Job& j);  // head_dim % 16 == 0; same bits as scalar

}  // namespace tessera::cpu::detail
