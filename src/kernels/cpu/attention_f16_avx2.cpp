// AVX2 attention over an f16 KV cache in llama.cpp's float order (see attention_f16.h); the
// same bits as attention_f16.cpp. A 16-lane accumulator of the reference order is a pair of
// 256-bit registers (lanes 0-7, 8-15); red16 of such a pair is hsum_ps(lo + hi), whose adds
// are exactly red16's. Lane accumulators of the output are stored lane-major (lane x head_dim)
// so that the per-key update runs along head_dim.
#include <algorithm>

#include "kernels/cpu/attention_f16.h"
#include "kernels/cpu/avx2_util.h"
#include "kernels/cpu/silu_avx2.h"

namespace tessera::cpu::detail {
namespace {

constexpr int64_t kLanes = 16;
constexpr int64_t kStep = 64;

inline int64_t round_up(int64_t v, int64_t a) { return (v + a - 1) / a * a; }

inline void f16_row(const uint16_t* src, int64_t n, float* dst) {
  for (int64_t i = 0; i < n; i += 8)
    _mm256_storeu_ps(dst + i,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
}

inline float red16(__m256 lo, __m256 hi) { return hsum_ps(_mm256_add_ps(lo, hi)); }

// n % 16 == 0
inline float dot_batched(const float* q, const float* k, int64_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0;
  for (int64_t i = 0; i < n; i += kLanes) {
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), _mm256_loadu_ps(k + i), a0);
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 8), _mm256_loadu_ps(k + i + 8), a1);
  }
  return red16(a0, a1);
}

inline float dot_single(const float* q, const float* k, int64_t n) {
  __m256 a[8];
  for (auto& r : a) r = _mm256_setzero_ps();
  const int64_t np = n / kStep * kStep;
  for (int64_t i = 0; i < np; i += kStep)
    for (int r = 0; r < 8; ++r)
      a[r] = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 8 * r), _mm256_loadu_ps(k + i + 8 * r), a[r]);
  // (A0 + A2) + (A1 + A3), each 16-lane accumulator A_j being registers 2j, 2j+1.
  const __m256 lo = _mm256_add_ps(_mm256_add_ps(a[0], a[4]), _mm256_add_ps(a[2], a[6]));
  const __m256 hi = _mm256_add_ps(_mm256_add_ps(a[1], a[5]), _mm256_add_ps(a[3], a[7]));
  double sum = red16(lo, hi);
  for (int64_t i = np; i < n; ++i) sum += static_cast<double>(q[i] * k[i]);
  return static_cast<float>(sum);
}

// red16 across 16 lane rows (each hd floats apart) for 8 consecutive columns.
inline __m256 red16_rows(const float* a, int64_t hd) {
  __m256 t[8];
  for (int l = 0; l < 8; ++l)
    t[l] = _mm256_add_ps(_mm256_loadu_ps(a + l * hd), _mm256_loadu_ps(a + (l + 8) * hd));
  for (int l = 0; l < 4; ++l) t[l] = _mm256_add_ps(t[l], t[l + 4]);
  return _mm256_add_ps(_mm256_add_ps(t[0], t[2]), _mm256_add_ps(t[1], t[3]));
}

}  // namespace

void attention_f16_job_avx2(const AttnF16Job& j) {
  const int64_t hd = j.head_dim, np = round_up(j.len, kStep);
  const int64_t lanes = j.batched ? kLanes : kStep;
  float* probs = j.ws;
  float* acc = probs + j.group * np;
  float* krow = acc + j.group * kStep * hd;
  float* vrow = krow + hd;
  for (int64_t t = 0; t < j.len; ++t) {
    f16_row(j.k + kv_pos_offset(j, t), hd, krow);
    for (int64_t g = 0; g < j.group; ++g) {
      const float* q = j.q + g * hd;
      probs[g * np + t] =
          (j.batched ? dot_batched(q, krow, hd) : dot_single(q, krow, hd)) * j.scale;
    }
  }
  for (int64_t g = 0; g < j.group; ++g) {
    float* p = probs + g * np;
    const float mx = *std::max_element(p, p + j.len);
    std::fill(p + j.len, p + np, 0.f);
    const int64_t n16 = round_up(j.len, kLanes);
    double sum = 0;
    for (int64_t b = 0; b < n16; b += kLanes) {
      __m256 e[2];
      for (int h = 0; h < 2; ++h) {
        const int64_t t = b + 8 * h;
        // keys past len stay zero (the exp of the padding is not taken)
        const __m256 live = _mm256_cmp_ps(
            _mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7),
            _mm256_set1_ps(static_cast<float>(std::max<int64_t>(0, j.len - t))), _CMP_LT_OQ);
        e[h] = _mm256_and_ps(live,
                             silu_exp8(_mm256_sub_ps(_mm256_loadu_ps(p + t), _mm256_set1_ps(mx))));
        _mm256_storeu_ps(p + t, e[h]);
      }
      sum += red16(e[0], e[1]);
    }
    const __m256 inv = _mm256_set1_ps(static_cast<float>(1.0 / sum));
    for (int64_t t = 0; t < n16; t += 8) {
      const __m128i h =
          _mm256_cvtps_ph(_mm256_mul_ps(_mm256_loadu_ps(p + t), inv), _MM_FROUND_TO_NEAREST_INT);
      _mm256_storeu_ps(p + t, _mm256_cvtph_ps(h));
    }
  }
  std::fill(acc, acc + j.group * lanes * hd, 0.f);
  for (int64_t t = 0; t < j.len; ++t) {
    f16_row(j.v + kv_pos_offset(j, t), hd, vrow);
    for (int64_t g = 0; g < j.group; ++g) {
      const __m256 w = _mm256_set1_ps(probs[g * np + t]);
      float* a = acc + (g * lanes + t % lanes) * hd;
      for (int64_t i = 0; i < hd; i += 8)
        _mm256_storeu_ps(a + i,
                         _mm256_fmadd_ps(w, _mm256_loadu_ps(vrow + i), _mm256_loadu_ps(a + i)));
    }
  }
  for (int64_t g = 0; g < j.group; ++g) {
    float* a = acc + g * lanes * hd;
    if (!j.batched) {  // fold the 64 lanes to 16 in place: lane l = (l + l+32) + (l+16 + l+48)
      for (int64_t l = 0; l < kLanes; ++l)
        for (int64_t i = 0; i < hd; i += 8) {
          const __m256 x = _mm256_add_ps(_mm256_loadu_ps(a + l * hd + i),
                                         _mm256_loadu_ps(a + (l + 32) * hd + i));
          const __m256 y = _mm256_add_ps(_mm256_loadu_ps(a + (l + 16) * hd + i),
                                         _mm256_loadu_ps(a + (l + 48) * hd + i));
          _mm256_storeu_ps(a + l * hd + i, _mm256_add_ps(x, y));
        }
    }
    for (int64_t i = 0; i < hd; i += 8) _mm256_storeu_ps(j.out + g * hd + i, red16_rows(a + i, hd));
  }
}

}  // namespace tessera::cpu::detail
