#include "kernels/cuda/decode_attention.h"

#include <string>

#include "core/error.h"
#include "kernels/cuda/act_quant.cuh"
#include "kernels/cuda/convert.cuh"
#include "kernels/cuda/launch.cuh"

namespace tessera::cuda {
namespace {
using namespace detail;

constexpr int kWarps = 4, kThreads = kWarps * 32;
// Keys per row group per iteration (K and V 16-byte loads per lane); the next iteration's loads
// are issued before this one's math (register double buffer), so memory latency overlaps the
// softmax. Group 8 keeps 2 to stay under 255 registers.

__device__ __forceinline__ void half8_to_f32(const uint4& v, float (&f)[8]) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 p = pair_to_f32<__half>(w[i]);
    f[2 * i] = p.x;
    f[2 * i + 1] = p.y;
  }
}

// A "row group" is LPR = HD/8 lanes that together hold one 16-byte slice each of a K or V row,
// so every K/V load is a coalesced 16-byte access and a dot product needs log2(LPR) shuffles.
template <class T, int HD, int G>
__global__ void __launch_bounds__(kThreads)
split_kernel(const T* q, const __half* k_cache, const __half* v_cache, const int32_t* seq_lens,
             int64_t max_ctx, int n_heads, int n_kv_heads, float scale_log2, int chunk,
             int n_splits, float* ws_acc, float2* ws_ml) {
  constexpr int LPR = HD / 8, RPW = 32 / LPR, NG = kWarps * RPW;
  pdl_wait();  // q and the KV row written by the previous kernel
  pdl_trigger();
  const int split = blockIdx.x, kvh = blockIdx.y, seq = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int grp_in_warp = lane / LPR, l = lane % LPR, grp = warp * RPW + grp_in_warp;
  const int len = seq_lens[seq];
  const int c0 = split * chunk, c1 = min(c0 + chunk, len);

  float qr[G][8];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    const T* qp = q + (static_cast<int64_t>(seq) * n_heads + kvh * G + g) * HD + l * 8;
    const uint4 raw = *reinterpret_cast<const uint4*>(qp);
    const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 p = pair_to_f32<T>(w[i]);
      // f16-KV contract: q rounded to f16; scale * log2(e) folded in so the softmax uses exp2.
      qr[g][2 * i] = __half2float(__float2half_rn(p.x)) * scale_log2;
      qr[g][2 * i + 1] = __half2float(__float2half_rn(p.y)) * scale_log2;
    }
  }
  float m[G], lsum[G], acc[G][8];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    m[g] = -INFINITY;
    lsum[g] = 0.f;
#pragma unroll
    for (int d = 0; d < 8; ++d) acc[g][d] = 0.f;
  }

  const int64_t row_stride = static_cast<int64_t>(n_kv_heads) * HD;
  const int64_t base = static_cast<int64_t>(seq) * max_ctx * row_stride + kvh * HD + l * 8;
  const uint4* kb = reinterpret_cast<const uint4*>(k_cache + base);
  const uint4* vb = reinterpret_cast<const uint4*>(v_cache + base);
  const int64_t rs4 = row_stride / 8;  // row stride in uint4

  // The trip count is uniform across the warp (tb is per warp) so the full-mask shuffles below
  // are legal; keys past c1 are masked, not skipped.
  constexpr int kUnroll = G >= 8 ? 2 : 4;
  constexpr int kStep = NG * kUnroll;
  uint4 kr[kUnroll], vr[kUnroll];
  auto load = [&](int tb, uint4 (&kd)[kUnroll], uint4 (&vd)[kUnroll]) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int t = tb + grp_in_warp + u * NG;
      kd[u] = t < c1 ? __ldcs(kb + t * rs4) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int t = tb + grp_in_warp + u * NG;
      vd[u] = t < c1 ? __ldcs(vb + t * rs4) : make_uint4(0, 0, 0, 0);
    }
  };
  load(c0 + warp * RPW, kr, vr);
  for (int tb = c0 + warp * RPW; tb < c1; tb += kStep) {
    uint4 kn[kUnroll], vn[kUnroll];
    load(tb + kStep, kn, vn);  // masked: past c1 it loads nothing
    float s[kUnroll][G];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      float kf[8];
      half8_to_f32(kr[u], kf);
#pragma unroll
      for (int g = 0; g < G; ++g) {
        float d = 0.f;
#pragma unroll
        for (int i = 0; i < 8; ++i) d = fmaf(qr[g][i], kf[i], d);
        s[u][g] = d;
      }
    }
#pragma unroll
    for (int off = LPR / 2; off > 0; off >>= 1)
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
#pragma unroll
        for (int g = 0; g < G; ++g) s[u][g] += __shfl_xor_sync(0xffffffffu, s[u][g], off);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (tb + grp_in_warp + u * NG >= c1)
#pragma unroll
        for (int g = 0; g < G; ++g) s[u][g] = -INFINITY;
#pragma unroll
    for (int g = 0; g < G; ++g) {
      float mx = m[g];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) mx = fmaxf(mx, s[u][g]);
      if (mx == -INFINITY) continue;  // nothing valid yet in this group: avoid inf - inf
      const float corr = exp2f(m[g] - mx);
      lsum[g] *= corr;
#pragma unroll
      for (int d = 0; d < 8; ++d) acc[g][d] *= corr;
      m[g] = mx;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      float vf[8];
      half8_to_f32(vr[u], vf);
#pragma unroll
      for (int g = 0; g < G; ++g) {
        const float p = m[g] == -INFINITY ? 0.f : exp2f(s[u][g] - m[g]);
        lsum[g] += p;
#pragma unroll
        for (int d = 0; d < 8; ++d) acc[g][d] = fmaf(p, vf[d], acc[g][d]);
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      kr[u] = kn[u];
      vr[u] = vn[u];
    }
  }

  // Merge the NG row groups of this block through shared memory.
  __shared__ float sm_m[NG][G], sm_l[NG][G];
  __shared__ float sm_acc[NG][G][HD];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    if (l == 0) {
      sm_m[grp][g] = m[g];
      sm_l[grp][g] = lsum[g];
    }
#pragma unroll
    for (int d = 0; d < 8; ++d) sm_acc[grp][g][l * 8 + d] = acc[g][d];
  }
  __syncthreads();
  for (int i = threadIdx.x; i < G * HD; i += kThreads) {
    const int g = i / HD, d = i % HD;
    float M = -INFINITY;
    for (int r = 0; r < NG; ++r) M = fmaxf(M, sm_m[r][g]);
    float o = 0.f, L = 0.f;
    if (M != -INFINITY)
      for (int r = 0; r < NG; ++r) {
        if (sm_m[r][g] == -INFINITY) continue;
        const float w = exp2f(sm_m[r][g] - M);
        o = fmaf(w, sm_acc[r][g][d], o);
        L = fmaf(w, sm_l[r][g], L);
      }
    const int64_t idx = (static_cast<int64_t>(seq) * n_heads + kvh * G + g) * n_splits + split;
    ws_acc[idx * HD + d] = o;
    if (d == 0) ws_ml[idx] = make_float2(M, L);
  }
}

// One block per (seq, head), HD threads: out = sum_s w_s acc_s / sum_s w_s l_s; optionally
// quantized for the next GEMV (HD % 32 == 0: each warp holds one 32-element block).
template <class T, int HD>
__global__ void combine_kernel(const float* ws_acc, const float2* ws_ml, int n_splits, T* out,
                               int8_t* qx, ActQ8Meta* meta) {
  pdl_wait();
  pdl_trigger();
  const int64_t sh = blockIdx.x;
  const int d = threadIdx.x;
  // Unrolled, unconditional loads (every split wrote its partial, empty ones as max = -inf,
  // acc = sum = 0): the loop's loads go out together instead of one round trip per split.
  float M = -INFINITY;
#pragma unroll 8
  for (int s = 0; s < n_splits; ++s) M = fmaxf(M, ws_ml[sh * n_splits + s].x);
  float o = 0.f, L = 0.f;
  if (M != -INFINITY)
#pragma unroll 8
    for (int s = 0; s < n_splits; ++s) {
      const float2 ml = ws_ml[sh * n_splits + s];
      const float a = ws_acc[(sh * n_splits + s) * HD + d];
      const float w = ml.x == -INFINITY ? 0.f : exp2f(ml.x - M);
      o = fmaf(w, a, o);
      L = fmaf(w, ml.y, L);
    }
  const T r = from_f32<T>(L > 0.f ? o / L : 0.f);
  out[sh * HD + d] = r;
  if (qx) quantize_block_warp(to_f32(r), sh * HD + d, qx, meta);
}

// Chunk length: enough blocks for ~3 per SM (what fits at group 4 with ~160 registers, so one
// wave and no tail), at least 32 keys (one block iteration at HD=128),
// a multiple of 32 so row groups stay aligned with chunk starts.
int chunk_len(int64_t n_seq, int64_t n_kv_heads, int64_t max_ctx) {
  const int64_t want_blocks = 3LL * sm_count();
  int64_t splits = (want_blocks + n_seq * n_kv_heads - 1) / (n_seq * n_kv_heads);
  if (splits < 1) splits = 1;
  int64_t chunk = (max_ctx + splits - 1) / splits;
  chunk = (chunk + 31) / 32 * 32;
  return static_cast<int>(chunk < 32 ? 32 : chunk);
}

template <class T, int HD, int G>
void launch(const T* q, const __half* k, const __half* v, const int32_t* lens, int64_t n_seq,
            int64_t max_ctx, int64_t n_heads, int64_t n_kv_heads, float scale, int chunk,
            int n_splits, float* ws_acc, float2* ws_ml, T* out, int8_t* qx, ActQ8Meta* meta,
            cudaStream_t s) {
  const dim3 grid(n_splits, static_cast<unsigned>(n_kv_heads), static_cast<unsigned>(n_seq));
  launch_kernel(split_kernel<T, HD, G>, grid, kThreads, 0, s, q, k, v, lens, max_ctx,
                static_cast<int>(n_heads), static_cast<int>(n_kv_heads),
                scale * 1.4426950408889634f, chunk, n_splits, ws_acc, ws_ml);
  launch_kernel(combine_kernel<T, HD>, static_cast<unsigned>(n_seq * n_heads), HD, 0, s, ws_acc,
                ws_ml, n_splits, out, qx, meta);
}

template <class T, int HD>
void dispatch_group(int64_t group, const T* q, const __half* k, const __half* v,
                    const int32_t* lens, int64_t n_seq, int64_t max_ctx, int64_t n_heads,
                    int64_t n_kv_heads, float scale, int chunk, int n_splits, float* ws_acc,
                    float2* ws_ml, T* out, int8_t* qx, ActQ8Meta* meta, cudaStream_t s) {
  switch (group) {
    case 1: return launch<T, HD, 1>(q, k, v, lens, n_seq, max_ctx, n_heads, n_kv_heads, scale, chunk, n_splits, ws_acc, ws_ml, out, qx, meta, s);
    case 2: return launch<T, HD, 2>(q, k, v, lens, n_seq, max_ctx, n_heads, n_kv_heads, scale, chunk, n_splits, ws_acc, ws_ml, out, qx, meta, s);
    case 4: return launch<T, HD, 4>(q, k, v, lens, n_seq, max_ctx, n_heads, n_kv_heads, scale, chunk, n_splits, ws_acc, ws_ml, out, qx, meta, s);
    case 8: return launch<T, HD, 8>(q, k, v, lens, n_seq, max_ctx, n_heads, n_kv_heads, scale, chunk, n_splits, ws_acc, ws_ml, out, qx, meta, s);
    default: break;
  }
  throw_error(ErrorCode::kUnsupported,
              "cuda::decode_attention: GQA group " + std::to_string(group) + " not in {1,2,4,8}");
}

}  // namespace

int decode_attention_splits(int64_t n_seq, int64_t n_kv_heads, int64_t max_ctx) {
  const int chunk = chunk_len(n_seq, n_kv_heads, max_ctx);
  return static_cast<int>((max_ctx + chunk - 1) / chunk);
}

size_t decode_attention_workspace_bytes(int64_t n_seq, int64_t n_heads, int64_t n_kv_heads,
                                        int64_t head_dim, int64_t max_ctx) {
  const int64_t parts = n_seq * n_heads * decode_attention_splits(n_seq, n_kv_heads, max_ctx);
  // acc block first (HD floats per part), then the (max, sum) pairs, 16-byte aligned.
  const size_t acc_bytes = (static_cast<size_t>(parts * head_dim) * sizeof(float) + 15) / 16 * 16;
  return acc_bytes + static_cast<size_t>(parts) * sizeof(float2);
}

template <class T>
void decode_attention(const T* q, const __half* k_cache, const __half* v_cache,
                      const int32_t* seq_lens, int64_t n_seq, int64_t max_ctx, int64_t n_heads,
                      int64_t n_kv_heads, int64_t head_dim, float scale, void* workspace,
                      size_t workspace_bytes, T* out, cudaStream_t stream, int8_t* qx,
                      ActQ8Meta* meta) {
  TESSERA_CHECK_ARG(n_kv_heads > 0 && n_heads % n_kv_heads == 0,
                    "cuda::decode_attention: n_heads must be a multiple of n_kv_heads");
  TESSERA_CHECK_ARG(max_ctx > 0 && max_ctx < (int64_t{1} << 31),
                    "cuda::decode_attention: max_ctx out of range");
  TESSERA_CHECK_ARG(workspace_bytes >= decode_attention_workspace_bytes(n_seq, n_heads, n_kv_heads,
                                                                        head_dim, max_ctx),
                    "cuda::decode_attention: workspace too small");
  if (n_seq <= 0) return;
  const int chunk = chunk_len(n_seq, n_kv_heads, max_ctx);
  const int n_splits = static_cast<int>((max_ctx + chunk - 1) / chunk);
  const int64_t parts = n_seq * n_heads * n_splits;
  float* ws_acc = static_cast<float*>(workspace);
  const size_t acc_bytes = (static_cast<size_t>(parts * head_dim) * sizeof(float) + 15) / 16 * 16;
  auto* ws_ml = reinterpret_cast<float2*>(static_cast<char*>(workspace) + acc_bytes);
  const int64_t group = n_heads / n_kv_heads;
  if (head_dim == 128)
    return dispatch_group<T, 128>(group, q, k_cache, v_cache, seq_lens, n_seq, max_ctx, n_heads,
                                  n_kv_heads, scale, chunk, n_splits, ws_acc, ws_ml, out, qx, meta, stream);
  if (head_dim == 64)
    return dispatch_group<T, 64>(group, q, k_cache, v_cache, seq_lens, n_seq, max_ctx, n_heads,
                                 n_kv_heads, scale, chunk, n_splits, ws_acc, ws_ml, out, qx, meta, stream);
  throw_error(ErrorCode::kUnsupported,
              "cuda::decode_attention: head_dim " + std::to_string(head_dim) + " not in {64,128}");
}

#define TESSERA_INSTANTIATE(T)                                                                  \
  template void decode_attention<T>(const T*, const __half*, const __half*, const int32_t*,     \
                                    int64_t, int64_t, int64_t, int64_t, int64_t, float, void*,  \
                                    size_t, T*, cudaStream_t, int8_t*, ActQ8Meta*);
TESSERA_INSTANTIATE(__half)
TESSERA_INSTANTIATE(__nv_bfloat16)
#undef TESSERA_INSTANTIATE

}  // namespace tessera::cuda
