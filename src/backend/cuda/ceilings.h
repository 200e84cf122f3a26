// Ceilings of the current CUDA device, measured (DESIGN.md section 5): device-to-device copy
// bandwidth (read + write bytes) and the bf16 GEMM rate cuBLASLt reaches on a large square
// product. Benchmarks divide by these to print % of speed of light.
#pragma once

namespace tessera::cuda {

double measure_copy_bandwidth_gbs();    // GB/s, best of several 1 GiB copies
double measure_bf16_gemm_tflops();      // TFLOP/s, 8192^3 bf16 -> f32, best of several

}  // namespace tessera::cuda
