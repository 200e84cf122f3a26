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

namespace tessera::cuda {

bool pdl_enabled();
void set_pdl_enabled(bool on);

// SMs of the current device, asked once per device (for sizing grids).
int sm_count();

}  // namespace tessera::cuda
