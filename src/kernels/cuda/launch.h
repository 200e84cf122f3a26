// Launch helpers: the programmatic dependent launch (PDL) switch for the decode-path kernels,
// and the SM count grids are sized by.
//
// With PDL on, the kernels below are launched with
// cudaLaunchAttributeProgrammaticStreamSerialization: a kernel may start while its predecessor in
// the stream is still running, does its input-independent prologue (the GEMVs issue their first
// weight loads), then waits in griddepcontrol.wait until the predecessor has completed and its
// writes are visible. Every thread of every such kernel executes that wait before it reads a
// predecessor's output and before it exits, so completion stays transitive along the stream (a
// kernel never completes before the one it follows). Inside a stream capture the launches become
// programmatic graph edges. The switch is process-wide and exists so benchmarks can measure what
// PDL buys; it is read at launch time (a captured graph keeps what it captured).
#pragma once

#include <cstdint>

namespace tessera::cuda {

bool pdl_enabled();
void set_pdl_enabled(bool on);

// Per-device caches index by the device ordinal; devices past the last slot are refused.
constexpr int kMaxDevices = 64;
// The current device's ordinal, in [0, kMaxDevices); throws a CUDA error otherwise.
int current_device();

// SMs of the current device, asked once per device (for sizing grids).
int sm_count();

// Blocks per row of a row kernel's (row, part) grid: parts until the launch has ~4 blocks per
// SM, at most `most` (>= 1). One block per row at 128 decode rows left RoPE + KV write walking
// its heads in series (11.1 us on the H200; docs/design/cuda_engine_history.md, session 9).
int64_t row_parts(int64_t rows, int64_t most);

}  // namespace tessera::cuda
