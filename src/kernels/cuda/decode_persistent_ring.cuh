// The persistent decode step's weight ring (decode_persistent.cu): per block, the stages of its
// rows of every projection of every layer stream through shared-memory slots filled by bulk
// copies (bulk_copy.cuh), and the GEMV phases consume them. Included by decode_persistent.cu only.
#pragma once

#include <cuda/atomic>

#include <cstdint>

#include "kernels/cuda/bulk_copy.cuh"
#include "kernels/cuda/decode_persistent_common.cuh"
#include "kernels/cuda/mmq_gemv_formats.cuh"
#include "kernels/cuda/warp.cuh"

namespace tessera::cuda::persistent {

// ---- The weight ring ------------------------------------------------------------------------
// Every block owns a fixed range of row groups of each projection (rows_of) and streams those
// rows' weights, for every layer in order, through a ring of shared-memory slots filled by bulk
// copies (cp.async.bulk, completion on one mbarrier per slot). A slot holds one stage: up to
// 8 whole rows of one projection (each section -- qs, scales, super-block scales -- copied as
// one 16-byte-aligned span that covers those rows). The last warp to finish a slot refills it
// with the next stage of the block's sequence (layer, projection, stage), so the copies run
// ahead across grid barriers, attention and row forming: weights never depend on activations.
// Nothing is prefetched that is not consumed by the same launch.

// This block's rows of an n-row projection: whole groups of kR rows, as even as they split.
__device__ __forceinline__ void rows_of(int n, int& r0, int& rows) {
  const int groups = n / kR, g0 = static_cast<int>(int64_t{groups} * blockIdx.x / gridDim.x),
            g1 = static_cast<int>(int64_t{groups} * (blockIdx.x + 1) / gridDim.x);
  r0 = g0 * kR;
  rows = (g1 - g0) * kR;
}

// Thread 0, once per launch: the block's rows and stage counts.
__device__ void ring_init(const Params& p, Ring& rg) {
  rg.first[0] = 0;
  for (int i = 0; i < 4; ++i) {
    rows_of(p.geo[i].n, rg.r0[i], rg.rows[i]);
    rg.first[i + 1] = rg.first[i] + (rg.rows[i] + p.geo[i].rows - 1) / p.geo[i].rows;
  }
  for (int s = 0; s < p.n_slots; ++s) {
    mbar_init(&rg.full[s]);
    rg.left[s] = 0;
  }
  fence_mbar_init();
}

// Copies stage t of the block's sequence into slot t % n_slots (one thread; the slot is free).
__device__ void ring_issue(const Params& p, Ring& rg, const uint8_t* const* wtab, uint8_t* slots, int t) {
  const int per_layer = rg.first[4];
  if (per_layer == 0 || t >= p.n_layers * per_layer) return;
  const int layer = t / per_layer, u = t - layer * per_layer;
  const int proj = (u >= rg.first[1]) + (u >= rg.first[2]) + (u >= rg.first[3]);
  const Geo& g = p.geo[proj];
  const int r = rg.r0[proj] + (u - rg.first[proj]) * g.rows, nr = min(g.rows, rg.r0[proj] + rg.rows[proj] - r);
  const uint8_t* base = wtab[layer * 4 + proj];
  const int slot = t % p.n_slots;
  uint8_t* dst = slots + int64_t{slot} * p.slot_bytes;
  uint64_t* bar = &rg.full[slot];
  const int64_t offs[3] = {static_cast<int64_t>(g.L.qs), static_cast<int64_t>(g.L.scales), static_cast<int64_t>(g.L.d)};
  const int64_t row_bytes[3] = {static_cast<int64_t>(g.L.qs_row), static_cast<int64_t>(g.L.scales_row),
                                static_cast<int64_t>(g.L.d_row)};
  const int dst_off[3] = {0, g.sc_off, g.d_off};
  int64_t lo[3];
  uint32_t len[3], total = 0;
#pragma unroll
  for (int s = 0; s < 3; ++s) {  // each section's span: from a 16-byte boundary to one
    lo[s] = (offs[s] + int64_t{r} * row_bytes[s]) & ~int64_t{15};
    const int64_t hi = (offs[s] + int64_t{r + nr} * row_bytes[s] + 15) & ~int64_t{15};
    len[s] = row_bytes[s] == 0 ? 0u : static_cast<uint32_t>(hi - lo[s]);
    total += len[s];
  }
  const uint64_t policy = l2_evict_first();  // weights are read once per step
  // The other warps' reads of the slot happen before this refill (their acq_rel count-out,
  // ring_gemv); the proxy fence orders them before the async proxy's writes (measured free).
  fence_proxy_async();
  mbar_expect_tx(bar, total);
#pragma unroll
  for (int s = 0; s < 3; ++s)
    if (len[s] != 0) bulk_copy(dst + dst_off[s], base + lo[s], len[s], bar, policy);
}

// Warps per row of a stage: 8-row stages give each warp 2 rows (sharing the activation loads)
// and half of k; shorter stages spread a row over kWarps / rows warps.
__host__ __device__ constexpr int rows_per_warp(int stage_rows) { return stage_rows == kWarps ? 2 : 1; }
__host__ __device__ constexpr int warps_per_row(int stage_rows) {
  return kWarps * rows_per_warp(stage_rows) / stage_rows;
}

// One warp's part of a stage: rows row0 .. row0 + RW - 1 of the slot s (stage rows start at
// projection row r), its blocks c_first, c_first + c_step, ...; acc[i] gets row row0 + i.
template <class F, int RW>
__device__ __forceinline__ void stage_dots(const Geo& g, const uint8_t* s, int r, int row0, int c_first,
                                           int c_step, const int8_t* qx, const MmqActMeta* meta, float* acc) {
  constexpr int kDepth = 4 / RW;  // blocks per lane loaded before their dot products
  const int nb = g.k / 32;
  const size_t qs_row = g.L.qs_row, sc_row = g.L.scales_row, d_row = g.L.d_row;
  const uint8_t* sc0 = s + g.sc_off + (g.L.scales + r * sc_row) % 16;
  const uint8_t* d0 = s + g.d_off + (g.L.d + r * d_row) % 16;
  for (int c0 = c_first; c0 < nb; c0 += kDepth * c_step) {
    typename F::W w[kDepth][RW];
    XBlk x[kDepth];
#pragma unroll
    for (int u = 0; u < kDepth; ++u) {
      const int c = min(c0 + u * c_step, nb - 1);
      x[u] = load_xblk(qx, meta, c);
#pragma unroll
      for (int i = 0; i < RW; ++i) {
        const int row = row0 + i;
        w[u][i] = F::lds(s + row * qs_row, sc0 + row * sc_row, d0 + row * d_row, c);
      }
    }
#pragma unroll
    for (int u = 0; u < kDepth; ++u)
      if (c0 + u * c_step < nb)
#pragma unroll
        for (int i = 0; i < RW; ++i) acc[i] += F::dot(w[u][i], x[u]);
  }
}

// One projection of the row (qx, meta: shared or global memory) over this block's rows of layer
// li, stage by stage from the ring. A stage's rows are split over the 8 warps (warps_per_row
// warps per row, rows_per_warp rows per warp, lanes striding over the row's 32-element blocks);
// each warp leaves its sums in Ring::part and counts itself out of the slot, and the last warp
// out refills the slot with stage t + n_slots: no block-wide barrier per stage. At the end the
// sums of each row are added in warp order (deterministic) and the epilogue runs over the
// block's rows in groups of kR.
template <class F, class Epi>
__device__ __noinline__ void ring_gemv(const Params& p, Ring& rg, const uint8_t* const* wtab, uint8_t* slots,
                                       int li, int proj, const int8_t* qx, const MmqActMeta* meta, const Epi epi) {
  const Geo& g = p.geo[proj];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int rpw = rows_per_warp(g.rows), wpr = warps_per_row(g.rows);
  const int row0 = warp / wpr * rpw, kpart = warp % wpr;  // this warp's first stage row, k part
  const int r_begin = rg.r0[proj], r_end = r_begin + rg.rows[proj];
  const int t0 = li * rg.first[4] + rg.first[proj], stages = rg.first[proj + 1] - rg.first[proj];
  const int c_first = kpart * 32 + lane, c_step = 32 * wpr;
  const bool timed = p.timing != nullptr && threadIdx.x == 0;  // block 0 sums; every block's max
  unsigned long long t_loop = timed ? now_ns() : 0, t_wait = 0;
  for (int j = 0; j < stages; ++j) {
    const int t = t0 + j, slot = t % p.n_slots, r = r_begin + j * g.rows, nr = min(g.rows, r_end - r);
    const uint8_t* s = slots + int64_t{slot} * p.slot_bytes;
    const unsigned long long w0 = timed ? now_ns() : 0;
    mbar_wait(&rg.full[slot], (t / p.n_slots) & 1);
    if (timed) t_wait += now_ns() - w0;
    if (row0 < nr) {  // nr is a multiple of kR, so both rows of a pair are in
      float acc[2] = {0.f, 0.f};
      if (rpw == 2)
        stage_dots<F, 2>(g, s, r, row0, c_first, c_step, qx, meta, acc);
      else
        stage_dots<F, 1>(g, s, r, row0, c_first, c_step, qx, meta, acc);
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        if (i >= rpw) break;
        const float v = warp_sum(acc[i]);
        if (lane == 0) rg.part[(j * g.rows + row0 + i) * wpr + kpart] = v;
      }
    }
    __syncwarp();
    if (lane == 0 &&
        ::cuda::atomic_ref<int, ::cuda::thread_scope_block>(rg.left[slot]).fetch_add(1, ::cuda::memory_order_acq_rel) ==
            kWarps - 1) {
      rg.left[slot] = 0;
      ring_issue(p, rg, wtab, slots, t + p.n_slots);
    }
  }
  if (timed) {  // block 0's warp 0: time waiting for stages, time in the stage loop (ns, summed over layers);
                // the longest loop of any block (ns, summed over layers)
    const unsigned long long loop = now_ns() - t_loop;
    if (blockIdx.x == 0) {
      p.timing[kRingTiming + 2 * proj] += t_wait;
      p.timing[kRingTiming + 2 * proj + 1] += loop;
    }
    atomicMax(&p.timing[kRingTiming + 8 + li * 4 + proj], loop);
  }
  __syncthreads();
  for (int gi = warp; gi < rg.rows[proj] / kR; gi += kWarps) {
    float v[kR];
#pragma unroll
    for (int i = 0; i < kR; ++i) {
      float sum = 0.f;
      for (int k = 0; k < wpr; ++k) sum += rg.part[(gi * kR + i) * wpr + k];
      v[i] = sum;
    }
    epi(r_begin + gi * kR, v, g.n, lane);
  }
}

// An n x k projection's stages: the most rows (8, 4, 2, 1) whose sections fit a slot; rows 0
// when not even one row fits (the step is then unsupported).
inline Geo make_geo(DType t, int64_t n, int64_t k) {
  Geo g{};
  g.n = static_cast<int>(n);
  g.k = static_cast<int>(k);
  g.L = gemv_quant_layout(t, n, k);
  const auto qs_row = static_cast<int64_t>(g.L.qs_row), sc_row = static_cast<int64_t>(g.L.scales_row),
             d_row = static_cast<int64_t>(g.L.d_row);
  for (int rows = 8; rows >= 1; rows /= 2) {
    // A section's span starts up to 15 bytes before its rows and ends up to 15 after.
    const int64_t sc_off = align_to(rows * qs_row, 16);
    const int64_t d_off = sc_off + align_to(rows * sc_row + 32, 16);
    const int64_t end = d_off + (d_row != 0 ? align_to(rows * d_row + 32, 16) : 0);
    if (end <= slot_bytes()) {
      g.rows = rows;
      g.sc_off = static_cast<int>(sc_off);
      g.d_off = static_cast<int>(d_off);
      return g;
    }
  }
  return g;
}

}  // namespace tessera::cuda::persistent
