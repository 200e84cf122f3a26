#include "kernels/cpu/llm_ops.h"

#include <algorithm>
#include <cmath>

#include "backend/cpu/thread_pool.h"
#include "core/half.h"
#include "kernels/cpu/matmul.h"

#include <type_traits>

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

size_t attention_workspace_floats(int64_t n_kv, int64_t n_heads, int64_t n_kv_heads,
                                  int64_t head_dim, int n_threads) {
  n_kv = std::max<int64_t>(n_kv, 1);
  const int64_t group = n_heads / n_kv_heads;
  // per thread: group score rows, group rounded queries, two converted K/V rows
  const int64_t per_thread = group * n_kv + group * head_dim + 2 * head_dim;
  return static_cast<size_t>(per_thread) * static_cast<size_t>(n_threads);
}

namespace {
inline const float* kv_row(const float* p, int64_t, float*) { return p; }
inline const float* kv_row(const uint16_t* p, int64_t n, float* tmp) {
  dequantize_row(DType::kF16, p, tmp, n);
  return tmp;
}
}  // namespace

template <class KV>
void attention(const float* q, const int32_t* q_pos, const KvPages& pages, int64_t rows,
               int64_t n_heads, const KV* k, const KV* v, int64_t n_kv_heads, int64_t head_dim,
               float scale, float* out, float* workspace, ThreadPool& pool) {
  const int64_t group = n_heads / n_kv_heads;
  const int64_t row_stride = n_kv_heads * head_dim;
  int64_t max_len = 1;
  for (int64_t r = 0; r < rows; ++r) max_len = std::max<int64_t>(max_len, q_pos[r] + 1);
  const int64_t per_thread = group * max_len + group * head_dim + 2 * head_dim;
  const int64_t bs = pages.block_size;
  pool.parallel_for(rows * n_kv_heads, [&](int64_t begin, int64_t end, int thread) {
    float* scores = workspace + thread * per_thread;  // group x max_len
    float* qg = scores + group * max_len;              // group x head_dim
    float* k_tmp = qg + group * head_dim;
    float* v_tmp = k_tmp + head_dim;
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
      for (int64_t t = 0; t < len; ++t) {
        const float* kt = kv_row(k + kv_offset(t), head_dim, k_tmp);
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
        if constexpr (std::is_same_v<KV, uint16_t>) {
          for (int64_t t = 0; t < len; ++t) s[t] = f16_to_f32(f32_to_f16(s[t] * inv));
        } else {
          for (int64_t t = 0; t < len; ++t) s[t] *= inv;
        }
        float* o = out + (r * n_heads + kh * group + g) * head_dim;
        std::fill(o, o + head_dim, 0.f);
      }
      for (int64_t t = 0; t < len; ++t) {
        const float* vt = kv_row(v + kv_offset(t), head_dim, v_tmp);
        for (int64_t g = 0; g < group; ++g) {
          const float wt = scores[g * max_len + t];
          float* o = out + (r * n_heads + kh * group + g) * head_dim;
          for (int64_t i = 0; i < head_dim; ++i) o[i] += wt * vt[i];
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

void swiglu(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = gate[i] / (1.f + std::exp(-gate[i])) * up[i];
}

}  // namespace tessera::cpu
