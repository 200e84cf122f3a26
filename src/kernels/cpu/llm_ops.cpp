#include "kernels/cpu/llm_ops.h"

#include <algorithm>
#include <cmath>

#include "backend/cpu/thread_pool.h"

namespace tessera::cpu {

void rms_norm(const float* x, const float* w, float eps, int64_t rows, int64_t d, float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * d;
    float* yr = y + r * d;
    double ss = 0;
    for (int64_t i = 0; i < d; ++i) ss += static_cast<double>(xr[i]) * xr[i];
    const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(d) + eps));
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
  constexpr int64_t kMaxHalf = 512;
  float cs[kMaxHalf], sn[kMaxHalf];
  for (int64_t r = 0; r < rows; ++r) {
    const double pos = static_cast<double>(positions[r]) * p.position_scale;
    for (int64_t i = 0; i < half && i < kMaxHalf; ++i) {
      double freq = std::pow(static_cast<double>(p.theta_base), -2.0 * i / p.n_rot);
      if (p.freq_factors) freq /= p.freq_factors[i];
      cs[i] = static_cast<float>(std::cos(pos * freq));
      sn[i] = static_cast<float>(std::sin(pos * freq));
    }
    for (int64_t h = 0; h < n_heads; ++h) {
      float* v = x + (r * n_heads + h) * head_dim;
      if (p.layout == RopeLayout::kInterleaved) {
        for (int64_t i = 0; i < half; ++i) {
          const float x0 = v[2 * i], x1 = v[2 * i + 1];
          v[2 * i] = x0 * cs[i] - x1 * sn[i];
          v[2 * i + 1] = x0 * sn[i] + x1 * cs[i];
        }
      } else {
        for (int64_t i = 0; i < half; ++i) {
          const float x0 = v[i], x1 = v[i + half];
          v[i] = x0 * cs[i] - x1 * sn[i];
          v[i + half] = x0 * sn[i] + x1 * cs[i];
        }
      }
    }
  }
}

size_t attention_workspace_floats(int64_t n_kv, int n_threads) {
  return static_cast<size_t>(n_kv) * static_cast<size_t>(n_threads);
}

void attention(const float* q, const int32_t* q_pos, int64_t rows, int64_t n_heads,
               const float* k, const float* v, int64_t kv_row_stride, int64_t n_kv,
               int64_t n_kv_heads, int64_t head_dim, float scale, float* out, float* workspace,
               ThreadPool& pool) {
  const int64_t group = n_heads / n_kv_heads;
  pool.parallel_for(rows * n_heads, [&](int64_t begin, int64_t end, int thread) {
    float* s = workspace + static_cast<size_t>(thread) * n_kv;
    for (int64_t job = begin; job < end; ++job) {
      const int64_t r = job / n_heads, h = job % n_heads, kh = h / group;
      const int64_t len = std::min<int64_t>(q_pos[r], n_kv - 1) + 1;
      const float* qh = q + (r * n_heads + h) * head_dim;
      float mx = -INFINITY;
      for (int64_t t = 0; t < len; ++t) {
        const float* kt = k + t * kv_row_stride + kh * head_dim;
        float dot = 0;
        for (int64_t i = 0; i < head_dim; ++i) dot += qh[i] * kt[i];
        s[t] = dot * scale;
        mx = std::max(mx, s[t]);
      }
      float sum = 0;
      for (int64_t t = 0; t < len; ++t) sum += (s[t] = std::exp(s[t] - mx));
      const float inv = 1.f / sum;
      float* o = out + (r * n_heads + h) * head_dim;
      std::fill(o, o + head_dim, 0.f);
      for (int64_t t = 0; t < len; ++t) {
        const float* vt = v + t * kv_row_stride + kh * head_dim;
        const float wt = s[t] * inv;
        for (int64_t i = 0; i < head_dim; ++i) o[i] += wt * vt[i];
      }
    }
  });
}

void swiglu(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = gate[i] / (1.f + std::exp(-gate[i])) * up[i];
}

}  // namespace tessera::cpu
