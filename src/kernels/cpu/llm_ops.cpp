#include "kernels/cpu/llm_ops.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "backend/cpu/cpu_features.h"
#include "backend/cpu/thread_pool.h"
#include "core/half.h"
#include "kernels/cpu/attention_f16.h"
#include "kernels/cpu/matmul.h"

namespace tessera::cpu {

void rms_norm(const float* x, const float* w, float eps, int64_t rows, int64_t d, float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * d;
    float* yr = y + r * d;
    // ggml's rounding steps (llama.cpp's CPU backend), so that the 8-bit activation
    // quantization after the norm sees the same bits: f32 squares summed in double, the mean
    // rounded to f32, the scale computed in f32; then x * scale, then * w.
    double ss = 0;
    for (int64_t i = 0; i < d; ++i) ss += static_cast<double>(xr[i] * xr[i]);
    const float mean = static_cast<float>(ss / static_cast<double>(d));
    const float inv = 1.0f / std::sqrt(mean + eps);
    for (int64_t i = 0; i < d; ++i) yr[i] = xr[i] * inv * w[i];
  }
}

void add_rms_norm(float* residual, const float* x, const float* w, float eps, int64_t rows,
                  int64_t d, float* y) {
  for (int64_t i = 0; i < rows * d; ++i) residual[i] += x[i];
  rms_norm(residual, w, eps, rows, d, y);
}

void rope(float* x, const int32_t* positions, int64_t rows, int64_t n_heads, int64_t head_dim,
          const RopeParams& p) {
  const int64_t half = p.n_rot / 2;
  // cos/sin depend only on (position, i): computed once per row and shared by all heads.
  // They follow ggml's rope cache step by step (llama.cpp's CPU backend), so that the rotated
  // q/k carry the same bits: theta_i = pos * theta_scale^i by repeated f32 multiplication,
  // theta_scale = powf(base, -2 / n_rot), divided by the frequency factor, times the linear
  // scale, then f32 cosf/sinf. The rotation is one fma on a rounded product, as ggml's compiled
  // loop does: x0 c - x1 s = fma(x0, c, -(x1 s)), x0 s + x1 c = fma(x0, s, x1 c).
  constexpr int64_t kMaxHalf = 512;
  float cs[kMaxHalf], sn[kMaxHalf];
  const float theta_scale = std::pow(p.theta_base, -2.0f / static_cast<float>(p.n_rot));
  for (int64_t r = 0; r < rows; ++r) {
    float theta = static_cast<float>(positions[r]);
    for (int64_t i = 0; i < half && i < kMaxHalf; ++i) {
      const float ff = p.freq_factors ? p.freq_factors[i] : 1.0f;
      const float angle = p.position_scale * (theta / ff);
      cs[i] = std::cos(angle);
      sn[i] = std::sin(angle);
      theta *= theta_scale;
    }
    for (int64_t h = 0; h < n_heads; ++h) {
      float* v = x + (r * n_heads + h) * head_dim;
      // Pair i is (v[2i], v[2i+1]) or (v[i], v[i + half]).
      const int64_t step = p.layout == RopeLayout::kInterleaved ? 2 : 1;
      const int64_t offset = p.layout == RopeLayout::kInterleaved ? 1 : half;
      for (int64_t i = 0; i < half; ++i) {
        float* a = v + step * i;
        const float x0 = a[0], x1 = a[offset];
        a[0] = std::fma(x0, cs[i], -(x1 * sn[i]));
        a[offset] = std::fma(x0, sn[i], x1 * cs[i]);
      }
    }
  }
}

namespace {
// Per thread: group rounded queries, then either (f32 cache) group score rows or (f16 cache)
// one job's scratch of attention_f16.h.
int64_t attention_floats_per_thread(int64_t n_kv, int64_t group, int64_t head_dim) {
  return group * head_dim +
         std::max(group * n_kv, detail::attention_f16_job_floats(n_kv, head_dim, group));
}
}  // namespace

size_t attention_workspace_floats(int64_t n_kv, int64_t n_heads, int64_t n_kv_heads,
                                  int64_t head_dim, int n_threads) {
  n_kv = std::max<int64_t>(n_kv, 1);
  return static_cast<size_t>(attention_floats_per_thread(n_kv, n_heads / n_kv_heads, head_dim)) *
         static_cast<size_t>(n_threads);
}

template <class KV>
void attention(const float* q, const int32_t* q_pos, const KvPages& pages, int64_t rows,
               int64_t n_heads, const KV* k, const KV* v, int64_t n_kv_heads, int64_t head_dim,
               float scale, float* out, float* workspace, ThreadPool& pool) {
  const int64_t group = n_heads / n_kv_heads;
  const int64_t row_stride = n_kv_heads * head_dim;
  int64_t max_len = 1;
  for (int64_t r = 0; r < rows; ++r) max_len = std::max<int64_t>(max_len, q_pos[r] + 1);
  const int64_t per_thread = attention_floats_per_thread(max_len, group, head_dim);
  const int64_t bs = pages.block_size;
  // f16 cache: llama.cpp's float order (attention_f16.h); the AVX2 job needs whole 16-lane rows.
  const auto f16_job = cpu_features().avx2 && head_dim % 16 == 0 ? detail::attention_f16_job_avx2
                                                                 : detail::attention_f16_job_scalar;
  pool.parallel_for(rows * n_kv_heads, [&](int64_t begin, int64_t end, int thread) {
    float* qg = workspace + thread * per_thread;  // group x head_dim
    float* scores = qg + group * head_dim;        // f32: group x max_len; f16: the job's scratch
    for (int64_t job = begin; job < end; ++job) {
      const int64_t r = job / n_kv_heads, kh = job % n_kv_heads;
      const int64_t len = int64_t{q_pos[r]} + 1;
      const int32_t* table = pages.tables[r];
      // Cache row of position t: its block's first row + the offset inside the block.
      auto kv_offset = [&](int64_t t) {
        return (int64_t{table[t / bs]} * bs + t % bs) * row_stride + kh * head_dim;
      };
      for (int64_t g = 0; g < group; ++g) {
        const float* src = q + (r * n_heads + kh * group + g) * head_dim;
        for (int64_t i = 0; i < head_dim; ++i)
          qg[g * head_dim + i] =
              std::is_same_v<KV, uint16_t> ? f16_to_f32(f32_to_f16(src[i])) : src[i];
      }
      if constexpr (std::is_same_v<KV, uint16_t>) {
        // The row's float order: its sequence's chunk in this forward call has several rows
        // (llama.cpp's prompt order) or one (its decode order); without the flag, the call's.
        const bool batched = pages.multi_row ? pages.multi_row[r] != 0 : rows >= 2;
        f16_job({qg, k + kh * head_dim, v + kh * head_dim, row_stride, table, bs, len, head_dim,
                 group, scale, batched, out + (r * n_heads + kh * group) * head_dim, scores});
      } else {
        for (int64_t t = 0; t < len; ++t) {
          const float* kt = k + kv_offset(t);
          for (int64_t g = 0; g < group; ++g) {
            const float* qh = qg + g * head_dim;
            float dot = 0;
            for (int64_t i = 0; i < head_dim; ++i) dot += qh[i] * kt[i];
            scores[g * max_len + t] = dot * scale;
          }
        }
        for (int64_t g = 0; g < group; ++g) {
          float* s = scores + g * max_len;
          float mx = -INFINITY;
          for (int64_t t = 0; t < len; ++t) mx = std::max(mx, s[t]);
          float sum = 0;
          for (int64_t t = 0; t < len; ++t) sum += (s[t] = std::exp(s[t] - mx));
          const float inv = 1.f / sum;
          for (int64_t t = 0; t < len; ++t) s[t] *= inv;
          float* o = out + (r * n_heads + kh * group + g) * head_dim;
          std::fill(o, o + head_dim, 0.f);
        }
        for (int64_t t = 0; t < len; ++t) {
          const float* vt = v + kv_offset(t);
          for (int64_t g = 0; g < group; ++g) {
            const float wt = scores[g * max_len + t];
            float* o = out + (r * n_heads + kh * group + g) * head_dim;
            for (int64_t i = 0; i < head_dim; ++i) o[i] += wt * vt[i];
          }
        }
      }
    }
  });
}

template void attention<float>(const float*, const int32_t*, const KvPages&, int64_t, int64_t,
                               const float*, const float*, int64_t, int64_t, float, float*,
                               float*, ThreadPool&);
template void attention<uint16_t>(const float*, const int32_t*, const KvPages&, int64_t, int64_t,
                                  const uint16_t*, const uint16_t*, int64_t, int64_t, float,
                                  float*, float*, ThreadPool&);

}  // namespace tessera::cpu
