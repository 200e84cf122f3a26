// CUDA token sampling: one token id per logits row, the same token runtime::Sampler picks on the
// host for the same row, parameters and uniform draw u (core/sample_row.h).
//
// Per row: non-finite -> -inf, the row's penalties, its n-gram bans (written into the row: the
// logits are modified in place, like the host sampler's), then greedy (argmax, lowest id on
// ties) or the host's truncations and draw over the order (logit desc, id asc) without sorting:
// top-k, top-p (first n whose cumulative weight w(l - max) >= top_p * sum), min-p (a value
// threshold on exp(l - max) in double), then the first token whose cumulative w((l - max) * r)
// exceeds u * total, r = 1 / T rounded once (capped at FLT_MAX); w is core/sample_weight.h's
// float exp, the host's to the bit, truncated to a multiple of 2^-56 and summed exactly as
// fixed point. Each boundary is found by a rank-select over the ordered (value, id) key space:
// passes that weigh 2048 bins of the range at once (integer atomics: deterministic), finished in
// shared memory once few candidates remain. The token can differ from the host's only where u or
// top_p lies within rounding of a boundary: the host sums in double (in order), the device
// exactly after truncation (~1e-12 over 128K weights), the host tests top-p as
// cum(w / sum) >= top_p where the device tests cum(w) >= top_p * sum, and min-p's double exp is
// the device's and the host's libm's (either may be 1 ulp off at the threshold).
//
// A thread-block cluster or one block per row (sample_rows picks by the rows); no allocation or
// synchronization (capturable into a graph). All pointers are device memory;
// rows[r].penalty_offset / banned_offset index penalties / banned.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/sample_row.h"

namespace tessera::cuda {

// blocks_per_row: 0 picks the kernel's shape by the launch's rows (the SMs each row gets); 16 or
// 8 force a thread-block cluster of that many blocks per row, 1 one block per row (tests run
// every shape on any GPU; TESSERA_SAMPLE_BLOCKS does the same for A/B runs).
void sample_rows(float* logits, int64_t rows, int64_t vocab, const SampleRow* params,
                 const SamplePenalty* penalties, const int32_t* banned, int32_t* ids,
                 cudaStream_t stream, int blocks_per_row = 0);

// Rows that are greedy with nothing to apply (every row's temperature <= 0, no penalties, no
// bans: the caller knows its SampleRows): the token sample_rows gives them (argmax of the cleaned
// logits, lowest id on ties, 0 when no logit is a candidate), as one pass over the row by blocks
// on every SM and a pick from their maxima (no cluster or bins: a batch-1 step's greedy draw in
// a few us, not ~40). logits are only read. ws: sample_greedy_workspace_bytes(rows, vocab) of
// device memory, 8-byte aligned (no initial contents needed). Capturable.
size_t sample_greedy_workspace_bytes(int64_t rows, int64_t vocab);
void sample_greedy_rows(const float* logits, int64_t rows, int64_t vocab, void* ws, int32_t* ids,
                        cudaStream_t stream);

// w[i] = the device's sample_weight(d[i]) (core/sample_weight.h), for tests that compare it bit
// for bit with the host's.
void sample_weights(const float* d, int64_t n, float* w, cudaStream_t stream);

}  // namespace tessera::cuda
