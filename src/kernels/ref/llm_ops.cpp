#include "kernels/ref/llm_ops.h"

#include <cmath>

#include "core/half.h"
#include <vector>

namespace tessera::ref {

void rms_norm(const float* x, const float* w, float eps, int64_t rows, int64_t d, float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * d;
    double ss = 0;
    for (int64_t i = 0; i < d; ++i) ss += static_cast<double>(xr[i]) * xr[i];
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(d) + eps);
    for (int64_t i = 0; i < d; ++i) y[r * d + i] = static_cast<float>(xr[i] * inv * w[i]);
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
  for (int64_t r = 0; r < rows; ++r) {
    const double pos = static_cast<double>(positions[r]) * p.position_scale;
    for (int64_t h = 0; h < n_heads; ++h) {
      float* v = x + (r * n_heads + h) * head_dim;
      for (int64_t i = 0; i < half; ++i) {
        double freq = std::pow(static_cast<double>(p.theta_base), -2.0 * i / p.n_rot);
        if (p.freq_factors) freq /= p.freq_factors[i];
        const double c = std::cos(pos * freq), s = std::sin(pos * freq);
        const int64_t a = p.layout == RopeLayout::kInterleaved ? 2 * i : i;
        const int64_t b = p.layout == RopeLayout::kInterleaved ? 2 * i + 1 : i + half;
        const double x0 = v[a], x1 = v[b];
        v[a] = static_cast<float>(x0 * c - x1 * s);
        v[b] = static_cast<float>(x0 * s + x1 * c);
      }
    }
  }
}

void attention(const float* q, const int32_t* q_pos, int64_t rows, int64_t n_heads,
               const float* k, const float* v, int64_t n_kv, int64_t n_kv_heads,
               int64_t head_dim, float scale, float* out, bool f16_products) {
  auto r16 = [&](double x) { return f16_products ? f16_to_f32(f32_to_f16(static_cast<float>(x))) : x; };
  const int64_t group = n_heads / n_kv_heads;
  std::vector<double> s(n_kv);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t last = std::min<int64_t>(q_pos[r], n_kv - 1);
    for (int64_t h = 0; h < n_heads; ++h) {
      const float* qh = q + (r * n_heads + h) * head_dim;
      const int64_t kh = h / group;
      double mx = -INFINITY;
      for (int64_t t = 0; t <= last; ++t) {
        const float* kt = k + (t * n_kv_heads + kh) * head_dim;
        double dot = 0;
        for (int64_t i = 0; i < head_dim; ++i) dot += r16(qh[i]) * kt[i];
        s[t] = dot * scale;
        mx = std::max(mx, s[t]);
      }
      double sum = 0;
      for (int64_t t = 0; t <= last; ++t) sum += (s[t] = std::exp(s[t] - mx));
      for (int64_t t = 0; t <= last; ++t) s[t] = r16(s[t] / sum);
      float* o = out + (r * n_heads + h) * head_dim;
      for (int64_t i = 0; i < head_dim; ++i) {
        double acc = 0;
        for (int64_t t = 0; t <= last; ++t) acc += s[t] * v[(t * n_kv_heads + kh) * head_dim + i];
        o[i] = static_cast<float>(acc);
      }
    }
  }
}

void swiglu(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const double g = gate[i];
    out[i] = static_cast<float>(g / (1.0 + std::exp(-g)) * up[i]);
  }
}

}  // namespace tessera::ref
