#include "models/cuda/llama_cuda_project.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <cstring>
#include <optional>
#include <type_traits>

#include "core/error.h"
#include "kernels/cuda/dequant_gemm.h"
#include "kernels/cuda/dequant_packed.h"
#include "kernels/cuda/gemv.h"
#include "kernels/cuda/row_ops.h"

namespace tessera::models::cuda_llama {
namespace {

int64_t dequant_gemm_max_rows_from_env() {
  const char* v = std::getenv("TESSERA_DEQUANT_GEMM_MAX_ROWS");
  return v ? std::atoll(v) : Projections::kDequantGemmMaxRows;
}
// TESSERA_MMQ_TC_WIDE: "0" keeps 9..16 rows off the two-tile tensor-core GEMV, "all" puts every
// supported type on it; otherwise each type up to cuda::mmq_tc_wide_rows (A/B benchmarks, tests).
int tc_wide_from_env() {
  const char* v = std::getenv("TESSERA_MMQ_TC_WIDE");
  return !v ? 1 : std::strcmp(v, "0") == 0 ? 0 : std::strcmp(v, "all") == 0 ? 2 : 1;
}
bool mmq_gemm_from_env() {
  const char* v = std::getenv("TESSERA_MMQ_GEMM");
  return v && std::strcmp(v, "1") == 0;
}

}  // namespace

Projections::Projections(const LlmConfig& cfg, const Weights& w)
    : cfg_(cfg),
      w_(w),
      dequant_gemm_max_rows_(dequant_gemm_max_rows_from_env()),
      mmq_gemm_(mmq_gemm_from_env()),
      tc_wide_(tc_wide_from_env()) {}

bool Projections::dequant_gemm_rows(int64_t rows) const {
  return w_.any_quant && !mmq_gemm_ && rows > cuda::kMmqGemvMaxRows && rows <= dequant_gemm_max_rows_;
}

// Weights::dequant_gemm_workspace_bytes, once per (rows, head). Not monotonic in rows: tile sizes
// and splits change.
size_t Projections::dequant_gemm_ws_bytes(int64_t rows, bool head) {
  const auto key = std::make_pair(rows, head);
  if (auto it = dg_ws_need_.find(key); it != dg_ws_need_.end()) return it->second;
  return dg_ws_need_[key] = w_.dequant_gemm_workspace_bytes(rows, head);
}

bool Projections::dequant_gemm_takes(const Proj& p, int64_t rows) const {
  return dequant_gemm_rows(rows) && std::all_of(p.parts.begin(), p.parts.end(), [&](const Proj::Part& part) {
           return cuda::dequant_gemm_supported(part.type, p.k);
         });
}

bool Projections::on_slices(const Proj& p, int64_t rows) const {
  return p.quant() && !mmq_gemm_ && rows > cuda::kMmqGemvMaxRows && !tc_takes_rows(p, rows) &&
         !dequant_gemm_takes(p, rows);
}

bool Projections::slices(int64_t rows) const {
  return w_.any_quant && rows > cuda::kMmqGemvMaxRows && !mmq_gemm_ && !(dequant_gemm_rows(rows) && w_.all_dequant_gemm);
}

size_t Projections::plan_call(int64_t rows, int64_t logit_rows) {
  dg_ws_bytes_ = std::max(dequant_gemm_rows(rows) ? dequant_gemm_ws_bytes(rows, false) : 0,
                          dequant_gemm_rows(logit_rows) ? dequant_gemm_ws_bytes(logit_rows, true) : 0);
  return dg_ws_bytes_;
}

bool Projections::tc_takes_rows(const Proj& p, int64_t rows) const {
  if (rows <= cuda::kMmqTcMaxRows || rows > cuda::kMmqTcMaxStagedRows || tc_wide_ == 0 || !cuda::mmq_tc_enabled() ||
      !p.quant())
    return false;
  return std::all_of(p.parts.begin(), p.parts.end(), [&](const Proj::Part& part) {
    return cuda::mmq_tc_supported(part.type, p.k) && (tc_wide_ == 2 || rows <= cuda::mmq_tc_wide_rows(part.type));
  });
}

bool Projections::norm_fusable(const Proj& producer, const Proj& consumer) {
  return producer.quant() && producer.parts.size() == 1 && consumer.quant();
}

bool Projections::keeps_cpu_rounding(const Proj& p) {
  return std::any_of(p.parts.begin(), p.parts.end(), [](const Proj::Part& pt) { return pt.type == DType::kQ4_1; });
}

bool Projections::half_swiglu(const Proj& gate_up, const Proj& down, bool with_q4_1) {
  if (!gate_up.quant() || gate_up.parts.size() != 1 || !down.quant() || down.parts.size() != 1) return false;
  if (keeps_cpu_rounding(down) && !with_q4_1) return false;
  const DType t = down.parts[0].type;
  return cuda::mmq_half_act_supported(t) && gate_up.n == 2 * down.k && down.k % 32 == 0;
}

void Projections::project_swiglu_half(const Proj& p, const In& in, const Scratch& b, __half* h, cudaStream_t s) {
  TESSERA_CHECK_ARG(p.parts.size() == 1 && (in.kind == In::kNormed || in.kind == In::kNorm),
                    "project_swiglu_half: one quantized part, on a norm's row");
  const Proj::Part& part = p.parts[0];
  if (in.kind == In::kNormed)
    return cuda::mmq_gemv_swiglu_half(part.type, part.packed, p.n / 2, p.k, in.qx, in.meta, h, s, &in.row_norm);
  cuda::mmq_rms_norm_quantize_rows(part.type, in.x, in.w, cfg_.norm_eps, 1, p.k, b.qx, b.meta, s, /*k32=*/true);
  cuda::mmq_gemv_swiglu_half(part.type, part.packed, p.n / 2, p.k, b.qx, b.meta, h, s);
}

cuda::OpCost Projections::cost(const Proj& p, int64_t rows, double in_bytes, double out_bytes) {
  double w = p.quant() ? 0.0 : 2.0 * static_cast<double>(p.n) * p.k;
  for (const Proj::Part& part : p.parts) w += static_cast<double>(part.n) * *dtype_row_bytes(part.type, p.k);
  return {w + static_cast<double>(rows) * (p.k * in_bytes + p.n * out_bytes), 2.0 * rows * p.n * p.k};
}

void Projections::matmul(const bf16* x, const Proj& p, int64_t rows, float* y, bool accumulate, cudaStream_t s) {
  const auto* w = reinterpret_cast<const uint16_t*>(p.w);
  if (rows == 1 && cuda::gemv_bf16_f32_supported(w, x, p.k))
    cuda::gemv_bf16_f32(w, x, p.n, p.k, y, accumulate, s);
  else
    gemm_.run(x, p.w, y, rows, p.n, p.k, accumulate, s);
}

void Projections::matmul(const bf16* x, const Proj& p, int64_t rows, bf16* y, cudaStream_t s) {
  gemm_.run(x, p.w, y, rows, p.n, p.k, s);
}

void Projections::prepare_rows(int64_t max_rows, cudaStream_t s) {
  const char* env = std::getenv("TESSERA_GEMM_PREPARE");
  if ((env && std::strcmp(env, "0") == 0) || w_.layers.empty()) return;
  const Layer& l = w_.layers[0];  // every layer has the same shapes
  struct Use {
    const Proj* p;
    bool accumulate, bf16_out;
  };
  const bool bf16_gu = !l.wgu.quant() && !l.wd.quant();
  const Use uses[] = {{&l.qkv, false, false}, {&l.wo, true, false}, {&l.wgu, false, bf16_gu},
                      {&l.wd, true, false}, {&w_.output, false, false}};
  const int64_t top = std::min<int64_t>(max_rows, cuda::GemmBf16::kTuneMaxRows);
  auto eligible = [&](const Use& u) { return !u.p->quant() && u.p->w && gemm_.selects_for(u.p->n, u.p->k); };
  if (top < 16 || std::none_of(std::begin(uses), std::end(uses), eligible)) return;
  std::fprintf(stderr, "tessera: timing cuBLASLt kernels for 16..%lld rows (a few seconds)\n",
               static_cast<long long>(top));
  for (int64_t rows = 16; rows / 2 < top; rows *= 2)
    for (const Use& u : uses)
      if (eligible(u)) gemm_.prepare_rows(u.p->w, rows, u.p->n, u.p->k, u.accumulate, u.bf16_out, s);
}

void Projections::bf16_input(const In& in, int64_t rows, int64_t k, const Scratch& b, cudaStream_t s) {
  switch (in.kind) {
    case In::kNorm:
      return cuda::rms_norm_rows_bf16(in.x, in.w, cfg_.norm_eps, rows, k, b.h, s);
    case In::kRows:
      return cuda::f32_to_bf16_rows(in.x, rows * k, b.h, s);
    case In::kSwiglu:
      return cuda::swiglu_rows_f32_bf16(in.x, rows, k, b.h, s);
    case In::kBf16:  // already there
    case In::kAttention:
    case In::kNormed:
      return;
  }
}

template <class Out>
void Projections::through_slices(const Proj& p, int64_t rows, const Scratch& b, Out* y, int64_t ldy,
                                 bool accumulate, cudaStream_t s) {
  TESSERA_CHECK_ARG(b.wdq != nullptr, "project: no weight-slice buffer for this call");
  const int64_t slice = std::max<int64_t>(64, kSliceElems / p.k / 64 * 64);
  for (const Proj::Part& part : p.parts)
    for (int64_t r0 = 0; r0 < part.n; r0 += slice) {
      const int64_t sn = std::min(slice, part.n - r0);
      cuda::dequantize_packed_bf16(part.type, part.packed, part.n, p.k, r0, sn, b.wdq, s);
      Out* out = y + part.row0 + r0;
      if constexpr (std::is_same_v<Out, float>) gemm_.run(b.h, b.wdq, out, rows, sn, p.k, accumulate, s, ldy);
      else gemm_.run(b.h, b.wdq, out, rows, sn, p.k, s, ldy);
    }
}

void Projections::project(const Proj& p, const In& in, int64_t rows, const Scratch& b, bf16* y, cudaStream_t s) {
  TESSERA_CHECK_ARG(on_slices(p, rows) && in.kind != In::kAttention && in.kind != In::kNormed,
                    "project: a bf16 product runs on the weight slices, on bf16 rows");
  bf16_input(in, rows, p.k, b, s);
  through_slices(p, rows, b, y, p.n, false, s);
}

void Projections::project(const Proj& p, const In& in, int64_t rows, const Scratch& b, float* y, int64_t ldy,
                          bool accumulate, cudaStream_t s, const cuda::MmqResidualNorm* next_norm) {
  if (next_norm != nullptr)
    TESSERA_CHECK_ARG(rows == 1 && p.parts.size() == 1 && accumulate && y == next_norm->x,
                      "project: forming the next norm's input needs one row, one part, added to the residual");
  if (in.kind == In::kNormed) {  // already quantized: the one-row GEMV scales by the row's 1 / rms
    TESSERA_CHECK_ARG(rows == 1 && next_norm == nullptr, "project: a normed input is one row");
    for (const Proj::Part& part : p.parts)  // every type takes the 32-element blocks (mmq.h)
      cuda::mmq_gemv(part.type, part.packed, part.n, p.k, in.qx, in.meta, 1, y + part.row0, ldy, accumulate, s, 0,
                     &in.row_norm);
    return;
  }
  if (in.kind == In::kHalf) {  // one f16 row (project_swiglu_half)
    TESSERA_CHECK_ARG(rows == 1, "project: an f16 input is one row");
    for (const Proj::Part& part : p.parts)
      if (next_norm != nullptr)
        cuda::mmq_gemv_half_residual_norm(part.type, part.packed, part.n, p.k, in.h, *next_norm, s);
      else
        cuda::mmq_gemv_half(part.type, part.packed, part.n, p.k, in.h, y + part.row0, accumulate, s);
    return;
  }
  // Above kMmqGemvMaxRows rows the integer-dot path only where the tensor-core GEMV takes every
  // part at this row count (tc_takes_rows), else bf16 rows into dequant_gemm or the slices.
  if (bf16_input_rows(p, rows)) {
    TESSERA_CHECK_ARG(in.kind != In::kAttention && in.kind != In::kNormed && next_norm == nullptr,
                      "project: attention partials and norm epilogues need a call on 8-bit rows");
    bf16_input(in, rows, p.k, b, s);
    if (on_slices(p, rows)) return through_slices(p, rows, b, y, ldy, accumulate, s);
    for (const Proj::Part& part : p.parts)  // the quantized bytes straight into tensor cores
      cuda::dequant_gemm_bf16(part.type, part.packed, part.n, p.k, b.h, rows, y + part.row0, ldy, accumulate,
                              b.dg_ws, dg_ws_bytes_, s);
    return;
  }
  TESSERA_CHECK_ARG(in.kind != In::kBf16, "project: bf16 rows need a call on bf16 rows");
  const bool tc_rows = tc_takes_rows(p, rows);
  // One row (the DP4A GEMV): K weights take 32-element blocks with f32 meta (mmq.h, k32); more
  // rows: Q8_K's 256-element blocks. Legacy weights: their own rule either way.
  const bool k32 = rows == 1;
  std::optional<cuda::MmqActRule> quantized_for;  // how the rows now in b.qx were quantized
  for (const Proj::Part& part : p.parts) {
    const cuda::MmqActRule rule = cuda::mmq_act_rule(part.type, k32);
    if (rule != quantized_for) {
      switch (in.kind) {
        case In::kNorm:
          cuda::mmq_rms_norm_quantize_rows(part.type, in.x, in.w, cfg_.norm_eps, rows, p.k, b.qx, b.meta, s, k32);
          break;
        case In::kRows:
          cuda::mmq_quantize_rows(part.type, in.x, p.k, rows, p.k, b.qx, b.meta, s, k32);
          break;
        case In::kSwiglu:
          cuda::mmq_swiglu_quantize_rows(part.type, in.x, rows, p.k, b.qx, b.meta, s, k32);
          break;
        case In::kAttention:
          cuda::mmq_quantize_attention_rows(part.type, in.partials, rows, p.k, b.qx, b.meta, s, k32);
          break;
        case In::kNormed:  // returned above
          break;
      }
      quantized_for = rule;
    }
    if (next_norm != nullptr)
      cuda::mmq_gemv_residual_norm(part.type, part.packed, part.n, p.k, b.qx, b.meta, *next_norm, s);
    else if (tc_rows)
      cuda::mmq_tc_gemv(part.type, part.packed, part.n, p.k, b.qx, b.meta, rows, y + part.row0, ldy, accumulate, s);
    else
      cuda::mmq_matmul(part.type, part.packed, part.n, p.k, b.qx, b.meta, rows, y + part.row0, ldy, accumulate, s);
  }
}

}  // namespace tessera::models::cuda_llama
